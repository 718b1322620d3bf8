package bridgetest

import (
	"context"
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
