// Package watermillforwardertest plays a Watermill service for tests of the
// watermill-forwarder source: it creates a forwarder topic's messages
// table as watermill-sql's publisher does, and publishes through
// Watermill's components/forwarder Publisher over watermill-sql's
// Publisher inside business transactions.
package watermillforwardertest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"testing"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder"
)

// Service is a Watermill service writing to one forwarder topic.
type Service struct {
	// Topic is the forwarder topic (table watermill_<Topic>).
	Topic string
	// DB is the service's own connection.
	DB *sql.DB

	schema   wmsql.SchemaAdapter
	business string // the business table, one row per transaction
	quote    func(string) string
}

// NewService creates a new forwarder topic (a unique name) in the
// PostgreSQL or MySQL database at url, its messages table (watermill-sql's
// DDL for the default schema, as the service's publisher runs it with
// AutoInitializeSchema) and a business table. All of them, and the offsets
// table a relay adds, are dropped when the test ends.
func NewService(t testing.TB, url string) *Service {
	t.Helper()
	ctx := context.Background()
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	s := &Service{Topic: "bt_" + hex.EncodeToString(b), DB: db.SQL}
	s.business = "orders_" + s.Topic
	switch db.Dialect() {
	case outbox.DialectPostgres:
		s.schema = wmsql.DefaultPostgreSQLSchema{}
		s.quote = func(n string) string { return `"` + n + `"` }
	case outbox.DialectMySQL:
		s.schema = wmsql.DefaultMySQLSchema{}
		s.quote = func(n string) string { return "`" + n + "`" }
	default:
		t.Fatalf("watermill-sql has no schema for %s", db.Dialect())
	}
	t.Cleanup(func() {
		for _, table := range []string{watermillforwarder.MessagesTable(s.Topic), watermillforwarder.OffsetsTable(s.Topic), s.business} {
			_, _ = s.DB.Exec("DROP TABLE IF EXISTS " + s.quote(table))
		}
	})

	queries, err := s.schema.SchemaInitializingQueries(wmsql.SchemaInitializingQueriesParams{Topic: s.Topic})
	require.NoError(t, err)
	tx, err := s.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	for _, q := range queries {
		_, err := tx.ExecContext(ctx, q.Query, q.Args...)
		require.NoError(t, err, q.Query)
	}
	require.NoError(t, tx.Commit())
	_, err = s.DB.ExecContext(ctx, "CREATE TABLE "+s.quote(s.business)+" (id VARCHAR(64) NOT NULL PRIMARY KEY)")
	require.NoError(t, err)
	return s
}

// Publish runs one business transaction: it inserts a business row named
// after the first message and publishes msgs to destination topic dest
// through forwarder.Publisher over a watermill-sql Publisher bound to the
// transaction, then commits it, or rolls it back when commit is false.
func (s *Service) Publish(ctx context.Context, commit bool, dest string, msgs ...*message.Message) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	insert := "INSERT INTO " + s.quote(s.business) + " (id) VALUES ($1)"
	if _, ok := s.schema.(wmsql.DefaultMySQLSchema); ok {
		insert = "INSERT INTO " + s.quote(s.business) + " (id) VALUES (?)"
	}
	if _, err := tx.ExecContext(ctx, insert, msgs[0].UUID); err != nil {
		return fmt.Errorf("business row: %w", err)
	}
	pub, err := wmsql.NewPublisher(wmsql.TxFromStdSQL(tx), wmsql.PublisherConfig{SchemaAdapter: s.schema}, nil)
	if err != nil {
		return err
	}
	fwd := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: s.Topic})
	if err := fwd.Publish(dest, msgs...); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback()
	}
	return tx.Commit()
}

// PublishRaw stores msgs in the forwarder topic as they are, without an
// envelope: what a service that bypassed forwarder.Publisher would leave.
func (s *Service) PublishRaw(ctx context.Context, msgs ...*message.Message) error {
	pub, err := wmsql.NewPublisher(wmsql.BeginnerFromStdSQL(s.DB), wmsql.PublisherConfig{SchemaAdapter: s.schema}, nil)
	if err != nil {
		return err
	}
	return pub.Publish(s.Topic, msgs...)
}

// BusinessRows counts the committed business rows.
func (s *Service) BusinessRows(t testing.TB) int {
	t.Helper()
	var n int
	require.NoError(t, s.DB.QueryRow("SELECT COUNT(*) FROM "+s.quote(s.business)).Scan(&n))
	return n
}

// OffsetAcked is the offset the relay's consumer group has committed, 0
// when none.
func (s *Service) OffsetAcked(t testing.TB) int64 {
	t.Helper()
	q := "SELECT COALESCE(MAX(offset_acked), 0) FROM " + s.quote(watermillforwarder.OffsetsTable(s.Topic)) + " WHERE consumer_group = $1"
	if _, ok := s.schema.(wmsql.DefaultMySQLSchema); ok {
		q = "SELECT COALESCE(MAX(offset_acked), 0) FROM " + s.quote(watermillforwarder.OffsetsTable(s.Topic)) + " WHERE consumer_group = ?"
	}
	var n int64
	require.NoError(t, s.DB.QueryRow(q, watermillforwarder.ConsumerGroup).Scan(&n))
	return n
}

// Offsets returns the offset of every stored message, in the order the
// relay reads them.
func (s *Service) Offsets(t testing.TB) []int64 {
	t.Helper()
	order := `ORDER BY transaction_id, "offset"`
	if _, ok := s.schema.(wmsql.DefaultMySQLSchema); ok {
		order = "ORDER BY `offset`"
	}
	rows, err := s.DB.Query("SELECT " + s.quote("offset") + " FROM " + s.quote(watermillforwarder.MessagesTable(s.Topic)) + " " + order)
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var o int64
		require.NoError(t, rows.Scan(&o))
		out = append(out, o)
	}
	require.NoError(t, rows.Err())
	return out
}
