package watermillforwarder

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// ConsumerGroup is the watermill-sql consumer group whose offset the relay
// keeps in watermill_offsets_<topic>. Other consumer groups of the same
// table (a Watermill forwarder that still runs, say) keep their own offsets.
const ConsumerGroup = "outbox-bridge"

// ErrUnsupportedDatabase is returned (wrapped) for a database that
// watermill-sql has no schema for: SQLite.
var ErrUnsupportedDatabase = errors.New("watermill-sql supports PostgreSQL and MySQL only")

// Why the relay reads with the default (non-queue) schema and offsets
// adapters, and why any SubscribeBatchSize is safe with them. Read from
// watermill-sql v4.1.2, pkg/sql:
//
//   - subscriber.go, (*Subscriber).query: one transaction per batch. It runs
//     SelectQuery (LIMIT SubscribeBatchSize), reads every row, then hands
//     the messages to the handler ONE AT A TIME (processMessage → sendMessage
//     waits for Ack, or on Nack resends the same message after
//     ResendInterval). sendMessage returns acked=false when the subscriber
//     is closing, when the subscription context ends or when the message's
//     AckDeadline passes; the loop then breaks, so lastRow is the last row
//     of the acked prefix. It then runs AckMessageQuery{LastRow: lastRow,
//     Rows: every selected row} and commits.
//   - offsets_adapter_postgresql.go and offsets_adapter_mysql.go
//     (DefaultPostgreSQLOffsetsAdapter / DefaultMySQLOffsetsAdapter),
//     AckMessageQuery: store LastRow's offset (PostgreSQL: and its
//     transaction_id) for the consumer group, and nothing else. The rows
//     after the acked prefix are selected again by the next batch.
//   - queue_offsets_adapter_postgresql.go and queue_offsets_adapter_mysql.go
//     (the queue adapters), AckMessageQuery: DELETE or UPDATE acked = TRUE
//     WHERE offset = ANY(Rows), i.e. every SELECTED row, sent or not. That
//     is the pitfall of FIELD-NOTES.md: a batch cut short by a shutdown or
//     an ack deadline marks unsent rows. The relay never uses them.
//   - The transaction is begun with the subscription context
//     (s.db.BeginTx(ctx, …)); database/sql rolls it back when that context
//     ends, and the server aborts it when the process dies. A rolled-back
//     batch is read again whole: its published messages are published again
//     with the same Nats-Msg-Id and JetStream drops them within its
//     duplicate window. A commit failure (ignored by query when it is
//     sql.ErrTxDone) has the same effect.
//   - schema_adapter_postgresql.go, SelectQuery: reads only rows with
//     transaction_id < pg_snapshot_xmin(pg_current_snapshot()), i.e. of
//     transactions that ended, so a transaction that commits late is never
//     skipped by an offset that moved past it (watermill#311).
//     schema_adapter_mysql.go reads with SERIALIZABLE isolation, whose
//     locking read waits for uncommitted inserts in the range, for the same
//     reason (its SubscribeIsolationLevel comment).
//
// So with the default adapters a stop at any point of a batch leaves the
// offset at or before the first message not yet published: nothing is
// skipped, whatever the batch size. The batch size only bounds how many
// messages a crash publishes again (the offset is written once per batch),
// so the relay uses relay.batch_size (rows per claim for the bridge table
// too), and Forwarder.Run closes the subscriber before anything is
// cancelled, so that a graceful stop commits the acked prefix.
// TestForwarderStopInTheMiddleOfABatch proves it against PostgreSQL.

// dialect is what differs between the databases watermill-sql supports.
type dialect interface {
	// adapters returns watermill-sql's default schema and offsets adapters
	// (never the queue ones; see above) reading batchSize rows at once.
	adapters(batchSize int) (wmsql.SchemaAdapter, wmsql.OffsetsAdapter)
	// tableExists reports whether table (unquoted) exists where the
	// adapters' unqualified names resolve.
	tableExists(ctx context.Context, db *outbox.DB, table string) (bool, error)
	// createOffsetsTable runs the offsets adapter's own CREATE TABLE IF NOT
	// EXISTS.
	createOffsetsTable(ctx context.Context, db *outbox.DB, topic string) error
}

func dialectOf(db *outbox.DB) (dialect, error) {
	switch db.Dialect() {
	case outbox.DialectPostgres:
		return postgresDialect{}, nil
	case outbox.DialectMySQL:
		return mysqlDialect{}, nil
	}
	return nil, fmt.Errorf("read Watermill forwarder tables from %s (%s): %w", db.Dialect(), db.Redacted, ErrUnsupportedDatabase)
}

// MessagesTable is the table watermill-sql's publisher writes for topic.
func MessagesTable(topic string) string { return "watermill_" + topic }

// OffsetsTable is the table of consumer-group offsets for topic.
func OffsetsTable(topic string) string { return "watermill_offsets_" + topic }

// SubscriberConfig configures the watermill-sql subscriber of a topic.
type SubscriberConfig struct {
	// Topic is the watermill-sql topic the forwarder publisher writes
	// (table watermill_<topic>). Required.
	Topic string
	// BatchSize is watermill-sql's SubscribeBatchSize: rows read per
	// transaction. Defaults to 500 rows.
	BatchSize int
	// PollInterval is the wait after a query that found no row. Defaults
	// to 250ms.
	PollInterval time.Duration
	// AckDeadline is how long one message may stay unacked; then the batch
	// ends and the message is read again. Defaults to 20s.
	AckDeadline time.Duration
	// RetryInterval is the wait before a nacked message is sent again and
	// before querying again after a database error. Defaults to 1s.
	RetryInterval time.Duration
}

// Defaults of SubscriberConfig.
const (
	BatchSizeDefault     = config.BatchSizeDefault
	PollIntervalDefault  = config.PollIntervalDefault
	AckDeadlineDefault   = config.AckDeadlineDefault
	RetryIntervalDefault = time.Second
)

// NewSubscriber returns watermill-sql's own subscriber of cfg.Topic in
// db's database, in consumer group ConsumerGroup, with the default schema
// and offsets adapters of its dialect and InitializeSchema off: the
// service's publisher creates the messages table, `bridge migrate` the
// offsets table. It checks that both tables exist.
//
// Errors: ErrUnsupportedDatabase (SQLite), outbox.ErrNoTable, "invalid config:
// <field>: <why>", or the database's error.
func NewSubscriber(ctx context.Context, db *outbox.DB, cfg SubscriberConfig, wlog watermill.LoggerAdapter) (*wmsql.Subscriber, error) {
	cfg.BatchSize = cmp.Or(cfg.BatchSize, BatchSizeDefault)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.AckDeadline = cmp.Or(cfg.AckDeadline, AckDeadlineDefault)
	cfg.RetryInterval = cmp.Or(cfg.RetryInterval, RetryIntervalDefault)
	if cfg.Topic == "" {
		return nil, fmt.Errorf("%w: Topic: must not be empty", config.ErrInvalid)
	}
	if cfg.BatchSize < 1 {
		return nil, fmt.Errorf("%w: BatchSize: %d: must be at least 1", config.ErrInvalid, cfg.BatchSize)
	}
	d, err := dialectOf(db)
	if err != nil {
		return nil, err
	}
	if err := CheckTables(ctx, db, cfg.Topic); err != nil {
		return nil, err
	}
	schema, offsets := d.adapters(cfg.BatchSize)
	ackDeadline := cfg.AckDeadline
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(db.SQL), wmsql.SubscriberConfig{
		ConsumerGroup:    ConsumerGroup,
		AckDeadline:      &ackDeadline,
		PollInterval:     cfg.PollInterval,
		ResendInterval:   cfg.RetryInterval,
		RetryInterval:    cfg.RetryInterval,
		SchemaAdapter:    schema,
		OffsetsAdapter:   offsets,
		InitializeSchema: false,
	}, wlog)
	if err != nil {
		return nil, fmt.Errorf("watermill-sql subscriber: %w", err)
	}
	return sub, nil
}

// CheckTables returns a wrapped outbox.ErrNoTable naming the table and who
// creates it when watermill_<topic> or watermill_offsets_<topic> is
// missing.
func CheckTables(ctx context.Context, db *outbox.DB, topic string) error {
	d, err := dialectOf(db)
	if err != nil {
		return err
	}
	for _, t := range []struct{ name, creator string }{
		{MessagesTable(topic), "the service's watermill-sql publisher creates it (AutoInitializeSchema, or the service's own migrations) when it first publishes to forwarder topic " + topic + "; check watermill.forwarder_topic"},
		{OffsetsTable(topic), "run `bridge migrate` with source: watermill-forwarder to create it"},
	} {
		ok, err := d.tableExists(ctx, db, t.name)
		if err != nil {
			return fmt.Errorf("look up table %s in %s: %w", t.name, db.Redacted, err)
		}
		if !ok {
			return fmt.Errorf("%w: %s in %s: %s", outbox.ErrNoTable, t.name, db.Redacted, t.creator)
		}
	}
	return nil
}

// Migrate creates the offsets table watermill_offsets_<topic> with
// watermill-sql's own DDL for the default offsets adapter (CREATE TABLE IF
// NOT EXISTS), the one table a relay needs that the service's publisher
// does not create. It reports whether the table was missing, and whether
// the messages table exists yet. Safe to run again and beside a running
// Watermill service.
func Migrate(ctx context.Context, db *outbox.DB, topic string) (created, messagesTable bool, err error) {
	d, err := dialectOf(db)
	if err != nil {
		return false, false, err
	}
	existed, err := d.tableExists(ctx, db, OffsetsTable(topic))
	if err != nil {
		return false, false, fmt.Errorf("look up table %s: %w", OffsetsTable(topic), err)
	}
	if !existed {
		if err := d.createOffsetsTable(ctx, db, topic); err != nil {
			return false, false, fmt.Errorf("create table %s in %s: %w", OffsetsTable(topic), db.Redacted, err)
		}
	}
	messagesTable, err = d.tableExists(ctx, db, MessagesTable(topic))
	if err != nil {
		return false, false, fmt.Errorf("look up table %s: %w", MessagesTable(topic), err)
	}
	return !existed, messagesTable, nil
}
