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

// TestStoreGone: Gone tells the table's own absence: false while it
// exists, true once it is dropped (on every database); the relay then
// stops retrying its marks, and only then (a missing-table error may be
// another relation's: a trigger's table, a search_path changed).
func TestStoreGone(t *testing.T) {
	bridgetest.OnEveryDatabase(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		_, table, store := bridgetest.Outbox(t, kind)
		gone, err := store.Gone(ctx)
		require.NoError(t, err)
		require.False(t, gone)
		_, err = store.DB().SQL.ExecContext(ctx, "DROP TABLE "+table)
		require.NoError(t, err)
		gone, err = store.Gone(ctx)
		require.NoError(t, err)
		require.True(t, gone)
	})
}
