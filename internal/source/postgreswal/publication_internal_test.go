package postgreswal

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/bridgetest/testdb"
)

// TestPublicationTablesInOneRead: one statement reads a publication and
// each table it publishes, with how it filters them (PostgreSQL 15: a row
// filter, a column list), for every subscriber of a stream; a
// publication left without tables, or that does not exist, reads as such.
func TestPublicationTablesInOneRead(t *testing.T) {
	db, err := sql.Open("pgx", bridgetest.PostgresLogicalURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	x := "pubread_" + testdb.RandomHex(4)
	exec := func(q string) {
		t.Helper()
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	exec("CREATE SCHEMA " + x)
	t.Cleanup(func() {
		_, _ = db.Exec("DROP PUBLICATION IF EXISTS " + x)
		_, _ = db.Exec("DROP SCHEMA " + x + " CASCADE")
	})
	for _, table := range []string{"a", "b", "c"} {
		exec("CREATE TABLE " + x + "." + table + " (id bigint PRIMARY KEY, subject text, payload bytea)")
	}
	exec("CREATE PUBLICATION " + x + " FOR TABLE " + x + ".a, " + x + ".b WHERE (subject <> 'x'), " + x + ".c (id, subject) WITH (publish = 'insert')")

	p, err := readPublicationTables(ctx, db, x)
	require.NoError(t, err)
	require.True(t, p.exists)
	require.True(t, p.insert)
	require.False(t, p.update)
	require.Equal(t, map[qualifiedName]string{
		{x, "a"}: "",
		{x, "b"}: "a row filter WHERE (subject <> 'x'::text)",
		{x, "c"}: "a column list without 1 of the table's columns",
	}, p.tables)
	require.Equal(t, publicationState{exists: true, insert: true, hasTable: true}, p.of(qualifiedName{x, "a"}))
	require.False(t, p.of(qualifiedName{x, "d"}).hasTable)
	one, err := readPublication(ctx, db, Names{Publication: x, Table: x + ".b"})
	require.NoError(t, err)
	require.Equal(t, publicationState{exists: true, insert: true, hasTable: true, partial: "a row filter WHERE (subject <> 'x'::text)"}, one, "one table's read")
	one, err = readPublication(ctx, db, Names{Publication: x, Table: x + ".d"})
	require.NoError(t, err)
	require.Equal(t, publicationState{exists: true, insert: true}, one, "a table it does not publish")

	exec("ALTER PUBLICATION " + x + " SET TABLE " + x + ".a")
	exec("ALTER PUBLICATION " + x + " DROP TABLE " + x + ".a")
	p, err = readPublicationTables(ctx, db, x)
	require.NoError(t, err)
	require.True(t, p.exists, "a publication without tables")
	require.Empty(t, p.tables)

	p, err = readPublicationTables(ctx, db, x+"_none")
	require.NoError(t, err)
	require.False(t, p.exists)
	require.Equal(t, publicationState{}, p.of(qualifiedName{x, "a"}))
}
