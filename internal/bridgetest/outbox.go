package bridgetest

import (
	"bytes"
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Outbox returns a fresh, migrated outbox table of kind ("sqlite",
// "postgres", "postgres-logical" (the server of PostgresLogicalURL, for
// source: postgres-wal) or "mysql"): its database URL, the table name and a store
// over it (closed when the test ends). Tests of one kind never share a
// table.
func Outbox(t testing.TB, kind string) (url, table string, store *outbox.Store) {
	t.Helper()
	switch kind {
	case "sqlite":
		url, table = SQLiteURL(t), "outbox"
	case "postgres":
		url, table = PostgresTable(t)
	case "postgres-logical":
		url, table = PostgresLogicalTable(t)
	case "mysql":
		url, table = MySQLTable(t)
	default:
		t.Fatalf("unknown database kind %q", kind)
	}
	ctx := context.Background()
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	applied, err := outbox.Migrate(ctx, db, table)
	require.NoError(t, err)
	require.NotEmpty(t, applied)
	store, err = outbox.NewStore(db, table)
	require.NoError(t, err)
	return url, table, store
}

// Kinds are the database kinds every driver test runs against.
var Kinds = []string{"sqlite", "postgres", "mysql"}

// OnEveryDatabase runs test against each of Kinds, each in a parallel
// subtest with its own table.
func OnEveryDatabase(t *testing.T, test func(t *testing.T, kind string)) {
	t.Parallel()
	for _, kind := range Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			test(t, kind)
		})
	}
}

// Enqueue inserts a row of key on subject events.t, its payload the key,
// and returns its id.
func Enqueue(t testing.TB, s *outbox.Store, key, orderingKey string) int64 {
	t.Helper()
	id, err := s.Enqueue(context.Background(), outbox.Entry{IdempotencyKey: key, Subject: "events.t", Payload: []byte(key), OrderingKey: orderingKey})
	require.NoError(t, err)
	return id
}

// RowState is what a test reads of one row (ReadRow).
type RowState struct {
	Status    string
	Attempts  int
	LastError sql.NullString
	Owner     sql.NullString
	Future    bool // available_at is after the database's now
}

// ReadRow reads the row id of s.
func ReadRow(t testing.TB, s *outbox.Store, id int64) RowState {
	t.Helper()
	q := "SELECT status, attempts, last_error, owner, available_at > now() FROM " + s.Table() + " WHERE id = $1"
	switch s.DB().Dialect() {
	case "sqlite":
		q = "SELECT status, attempts, last_error, owner, available_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now') FROM " + s.Table() + " WHERE id = ?"
	case "mysql":
		q = "SELECT status, attempts, last_error, owner, available_at > UTC_TIMESTAMP(6) FROM " + s.Table() + " WHERE id = ?"
	}
	var r RowState
	require.NoError(t, s.DB().SQL.QueryRow(q, id).Scan(&r.Status, &r.Attempts, &r.LastError, &r.Owner, &r.Future))
	return r
}

// ClaimIDs claims up to 100 rows of s for owner and returns their ids.
func ClaimIDs(t testing.TB, s *outbox.Store, owner string) []int64 {
	t.Helper()
	rows, err := s.Claim(context.Background(), owner, 100)
	require.NoError(t, err)
	ids := make([]int64, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

// EnqueuePayload inserts a row of key whose payload is size bytes, and
// returns its id.
func EnqueuePayload(t testing.TB, s *outbox.Store, key string, size int) int64 {
	t.Helper()
	id, err := s.Enqueue(context.Background(), outbox.Entry{IdempotencyKey: key, Subject: "events.t", Payload: bytes.Repeat([]byte{'x'}, size)})
	require.NoError(t, err)
	return id
}
