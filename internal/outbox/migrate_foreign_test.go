package outbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestMigrateRefusesAForeignTable: on every database, Migrate of a name
// that a table not made by bridge migrate already has (no
// <table>_migrations beside it) fails with ErrForeignTable, naming the
// table, and leaves nothing behind: no version table (before, goose made
// one, failed on CREATE TABLE with "partial migration error … already
// exists" and left the version table marked dirty: a newcomer's trial).
func TestMigrateRefusesAForeignTable(t *testing.T) {
	bridgetest.OnEveryDatabase(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		url, table, _ := bridgetest.Outbox(t, kind)
		db, err := outbox.Open(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		foreign := table + "_foreign"
		_, err = db.SQL.ExecContext(ctx, "CREATE TABLE "+foreign+" (id integer)")
		require.NoError(t, err)
		_, err = outbox.Migrate(ctx, db, foreign)
		require.ErrorIs(t, err, outbox.ErrForeignTable)
		require.ErrorContains(t, err, foreign)
		_, err = db.SQL.ExecContext(ctx, "SELECT 1 FROM "+foreign+"_migrations")
		require.Error(t, err, "no version table left beside it")
	})
}
