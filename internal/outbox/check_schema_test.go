package outbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestMissingColumnSaysMigrate: a table of the configured name that lacks
// columns of the contract (created by hand, or behind the schema) is
// reported as not migrated on every database, SQLite included, whose error
// for it has no code of its own ("no such column").
func TestMissingColumnSaysMigrate(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			url := bridgetest.SQLiteURL(t)
			table := "outbox"
			switch kind {
			case "postgres":
				url, table = bridgetest.PostgresTable(t)
			case "mysql":
				url, table = bridgetest.MySQLTable(t)
			}
			ctx := context.Background()
			db, err := outbox.Open(ctx, url)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			_, err = db.SQL.ExecContext(ctx, "CREATE TABLE "+table+" (id INTEGER, subject TEXT)")
			require.NoError(t, err)
			store, err := outbox.NewStore(db, table)
			require.NoError(t, err)
			err = store.CheckSchema(ctx)
			require.ErrorIs(t, err, outbox.ErrNoTable)
			require.Contains(t, err.Error(), "bridge migrate")
		})
	}
}
