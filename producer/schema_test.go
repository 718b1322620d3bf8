package producer_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestExampleTableMatchesMigration keeps the SQLite DDL copied into
// example_test.go equal to the table `bridge migrate` creates.
func TestExampleTableMatchesMigration(t *testing.T) {
	t.Parallel()
	example, err := openExampleDB(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { example.Close() })
	migrated := setup(t, "sqlite")
	require.Equal(t, tableInfo(t, migrated.prod), tableInfo(t, example))

	// The relay accepts the example's table as its own.
	db, err := outbox.Open(context.Background(), "sqlite:"+t.TempDir()+"/app.db")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.SQL.Exec(outboxSQLite)
	require.NoError(t, err)
	store, err := outbox.NewStore(db, "outbox")
	require.NoError(t, err)
	require.NoError(t, store.CheckSchema(context.Background()))
}

// tableInfo describes the columns of table outbox: name, type, NOT NULL,
// default, primary key.
func tableInfo(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`SELECT name, type, "notnull", COALESCE(dflt_value, 'NULL'), pk FROM pragma_table_info('outbox') ORDER BY cid`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name, typ, dflt string
		var notNull, pk int
		require.NoError(t, rows.Scan(&name, &typ, &notNull, &dflt, &pk))
		out = append(out, fmt.Sprintf("%s %s notnull=%d default=%s pk=%d", name, typ, notNull, dflt, pk))
	}
	require.NoError(t, rows.Err())
	require.Len(t, out, 17)
	return out
}
