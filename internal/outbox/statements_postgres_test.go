package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strings"
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
// its mode, also with the name escaped, and a password that holds the name
// names no mode (on a server that lets the test's role in without a
// password, as the test servers do). Behind PgBouncer the relay keeps to
// unnamed statements: cmd/bridge's TestPgBouncerTransactionMode.
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

	// The URL's own parameter, however written; a password that holds
	// its name is no parameter.
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	escaped, err := outbox.Open(ctx, url+sep+"default%5Fquery%5Fexec%5Fmode=cache_describe")
	require.NoError(t, err)
	t.Cleanup(func() { escaped.Close() })
	require.Equal(t, "cache describe", escaped.Statements())
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	u.User = neturl.UserPassword(u.User.Username(), "default_query_exec_mode=exec")
	pw, err := outbox.Open(ctx, u.String())
	if err == nil { // a server that checks passwords refuses this one
		t.Cleanup(func() { pw.Close() })
		require.Equal(t, "prepared", pw.Statements(), "a password that names the parameter")
	}
}

// TestPostgresPlanChangedIsRetried: a schema change that alters a prepared
// statement's result columns makes its next run fail once (0A000 "cached
// plan must not change result type"); the relay logs that at WARN, as a
// conflict that running again resolves, and the run after it succeeds.
// The class holds under any lc_messages: it reads the routine that raised
// the error, not the message.
func TestPostgresPlanChangedIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, table := bridgetest.PostgresTable(t)
	schema, _, _ := strings.Cut(table, ".")
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.SQL.ExecContext(ctx, "CREATE TABLE "+schema+".plan_t (id int PRIMARY KEY, v varchar(10))")
	require.NoError(t, err)
	_, err = db.SQL.ExecContext(ctx, "INSERT INTO "+schema+".plan_t VALUES (1, 'x')")
	require.NoError(t, err)

	conn, err := db.SQL.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	read := func() error {
		var v string
		return conn.QueryRowContext(ctx, "SELECT v FROM "+schema+".plan_t WHERE id = $1", 1).Scan(&v)
	}
	require.NoError(t, read())
	_, err = db.SQL.ExecContext(ctx, "ALTER TABLE "+schema+".plan_t ALTER COLUMN v TYPE text")
	require.NoError(t, err)
	err = read()
	require.ErrorContains(t, err, "0A000", "the prepared statement's plan outlived the schema change")
	require.Equal(t, slog.LevelWarn, outbox.FailureLevel(err))
	// A server whose lc_messages is not English words the message
	// otherwise; the class follows the routine that raised it.
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	translated := *pgErr
	translated.Message = "gecachter Plan darf den Ergebnistyp nicht ändern"
	require.Equal(t, slog.LevelWarn, outbox.FailureLevel(fmt.Errorf("claim: %w", &translated)), "the same refusal in German")
	require.NoError(t, read(), "run again")
}

// TestPostgresPreparedStatementRefused: when the server session loses the
// statements the client prepared — what a pooler that announces the
// server's own process id does when it hands the session to another
// client and resets it (PgBouncer's server_reset_query, DISCARD ALL) — the
// statement fails once (26000), that session is closed, the pool's other
// sessions, which prepared too, are not used again, and every session
// opened afterwards runs without named prepared statements. The pool says
// so once, at WARN: its start-up statements=prepared no longer holds. The
// same SQLSTATEs raised for another reason (a function's RAISE) change
// nothing.
func TestPostgresPreparedStatementRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs bridgetest.SyncBuffer
	db, err := outbox.OpenSession(ctx, bridgetest.PostgresURL(t), outbox.Session{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.Equal(t, "prepared", db.Statements())

	conn, err := db.SQL.Conn(ctx)
	require.NoError(t, err)
	require.Positive(t, preparedOn(t, conn))
	// The same codes raised by anything but a lost statement of the pool
	// change nothing.
	for _, code := range []string{"26000", "42P05"} {
		_, err = conn.ExecContext(ctx, "DO $$ BEGIN RAISE SQLSTATE '"+code+"'; END $$")
		var raised *pgconn.PgError
		require.ErrorAs(t, err, &raised)
		require.Equal(t, code, raised.Code)
	}
	require.Equal(t, "prepared", db.Statements(), "after a function raised 26000 and 42P05")
	require.Empty(t, logs.String())
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
	_, err = db.SQL.ExecContext(ctx, "SELECT 1/0") // another error: no second line
	require.Error(t, err)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 1, "one line for the switch: %q", logs.String())
	var line struct{ Level, Msg, Statements, Sqlstate string }
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &line))
	require.Equal(t, "WARN", line.Level)
	require.Contains(t, line.Msg, "without named prepared statements")
	require.Equal(t, "unnamed", line.Statements)
	require.Equal(t, "26000", line.Sqlstate)
}
