package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// bridge migrate --print writes the SQL of the configured kind of database
// and opens nothing: the SQLite file it names is not created.
func TestMigratePrint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runBridge(t, dir, nil, "migrate", "--print", "--database-url", "sqlite:./nope/outbox.db")
	require.Equal(t, 0, r.code, "bridge migrate --print\n%s", r)
	require.Contains(t, r.stdout, "CREATE TABLE outbox (")
	require.Contains(t, r.stdout, "INSERT INTO outbox_migrations (version_id, is_applied) VALUES (1, 1);")
	_, err := os.Stat(filepath.Join(dir, "nope"))
	require.ErrorIs(t, err, os.ErrNotExist)

	r = runBridge(t, dir, nil, "migrate", "--print", "--database-url", "postgres://db/app", "--table", "app.outbox")
	require.Equal(t, 0, r.code, "bridge migrate --print\n%s", r)
	require.Contains(t, r.stdout, "CREATE TRIGGER outbox_notify AFTER INSERT ON app.outbox")
	require.Contains(t, r.stdout, "DROP TRIGGER IF EXISTS outbox_notify ON app.outbox;", "migration 00004")
	// Migration 00005 runs outside a transaction block (CONCURRENTLY), so
	// the script ends with it and its record, without COMMIT.
	require.True(t, strings.HasSuffix(r.stdout, "DROP INDEX CONCURRENTLY IF EXISTS app.outbox_claimable_idx;\n"+
		"INSERT INTO app.outbox_migrations (version_id, is_applied) VALUES (5, true);\n"), r.stdout)

	r = runBridge(t, dir, nil, "migrate", "--after", "1")
	require.Equal(t, 2, r.code, "--after without --print\n%s", r)
}
