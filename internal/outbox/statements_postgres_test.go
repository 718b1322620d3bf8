package outbox_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// preparedOn runs a statement with an argument on conn, then returns how
// many named prepared statements conn's server session holds.
func preparedOn(t *testing.T, conn *sql.Conn) int {
	t.Helper()
	ctx := context.Background()
	var one int
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT $1::int", 1).Scan(&one))
	var n int
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_prepared_statements").Scan(&n))
	return n
}

// pinSessions pins n distinct sessions of db at once (the pool opens the ones
// it lacks) and closes them at the end of the test.
func pinSessions(t *testing.T, db *outbox.DB, n int) []*sql.Conn {
	t.Helper()
	var out []*sql.Conn
	for range n {
		c, err := db.SQL.Conn(context.Background())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

// TestPostgresStatementMode: connected to the server itself, every session
// of the pool plans each statement once (named prepared statements), the
// pool's first session included, which was opened before the pool knew it
// was not behind a pooler; a URL that names default_query_exec_mode keeps
// its mode. Behind PgBouncer the relay keeps to unnamed statements:
// cmd/bridge's TestPgBouncerTransactionMode.
func TestPostgresStatementMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := bridgetest.PostgresURL(t)

	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	for i, c := range pinSessions(t, db, 3) {
		require.Positive(t, preparedOn(t, c), "session %d of a direct connection has no prepared statement", i)
	}
	require.Equal(t, "prepared", db.Statements())

	described, err := outbox.Open(ctx, withParams(t, url, "default_query_exec_mode", "cache_describe"))
	require.NoError(t, err)
	t.Cleanup(func() { described.Close() })
	for i, c := range pinSessions(t, described, 2) {
		require.Zero(t, preparedOn(t, c), "session %d: the URL's cache_describe was not kept", i)
	}
	require.Equal(t, "cache describe", described.Statements())
}

// TestPostgresPreparedStatementRefused: when the server session loses the
// statements the client prepared — what a pooler that announces the
// server's own process id does when it hands the session to another
// client and resets it (PgBouncer's server_reset_query, DISCARD ALL) — the
// statement fails once (26000), that session is closed, the pool's other
// sessions, which prepared too, are not used again, and every session
// opened afterwards runs without named prepared statements.
func TestPostgresPreparedStatementRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := outbox.Open(ctx, bridgetest.PostgresURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	conn, err := db.SQL.Conn(ctx)
	require.NoError(t, err)
	require.Positive(t, preparedOn(t, conn))
	other, err := db.SQL.Conn(ctx) // prepared too, back in the pool below
	require.NoError(t, err)
	require.Positive(t, preparedOn(t, other))
	require.NoError(t, other.Close())
	_, err = conn.ExecContext(ctx, "DISCARD ALL")
	require.NoError(t, err)
	var one int
	err = conn.QueryRowContext(ctx, "SELECT $1::int", 1).Scan(&one)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "a prepared statement the session lost")
	require.Equal(t, "26000", pgErr.Code)
	require.NoError(t, conn.Close())

	for i, c := range pinSessions(t, db, 2) {
		require.Zero(t, preparedOn(t, c), "session %d after a refused prepared statement", i)
	}
	require.Equal(t, "unnamed", db.Statements())
}
