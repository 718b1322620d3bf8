package outbox_test

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// withParams adds query parameters to a database URL.
func withParams(t *testing.T, raw string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	for i := 0; i < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// sessions counts the server sessions of application name on the
// PostgreSQL test server.
func sessions(t *testing.T, admin *sql.DB, name string) int {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&n))
	return n
}

// TestPostgresReadOnlySessionIsClosed: a session whose write is refused as
// read-only (SQLSTATE 25006) is closed at once, and the readiness check
// says that the database does not accept writes; a writable one passes.
func TestPostgresReadOnlySessionIsClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, table, _ := bridgetest.Outbox(t, "postgres")
	admin, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })

	name := "bridge-ro-" + time.Now().Format("150405.000000")
	db, err := outbox.OpenSession(ctx, withParams(t, url, "default_transaction_read_only", "on"), outbox.Session{Name: name})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := outbox.NewStore(db, table)
	require.NoError(t, err)
	// The session that opened the pool is retired at its next use (it was
	// opened before the pool knew it could prepare statements): the ping
	// opens another; the server lists a closed backend for a moment.
	require.NoError(t, db.SQL.PingContext(ctx))
	require.Eventually(t, func() bool { return sessions(t, admin, name) == 1 }, 5*time.Second, 10*time.Millisecond,
		"the pool's session is named %q", name)

	_, err = store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "k", Subject: "events.ro"})
	require.ErrorContains(t, err, "25006")
	// Closed by the client at once; the server lists the backend until it
	// has noticed, a moment later on a loaded machine.
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&n)
		return err == nil && n == 0
	}, 5*time.Second, 10*time.Millisecond, "the read-only session was not closed")

	err = db.CheckWritable(ctx)
	require.ErrorIs(t, err, outbox.ErrReadOnly)
	require.ErrorContains(t, err, "read-only")

	writable, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { writable.Close() })
	require.NoError(t, writable.CheckWritable(ctx))
}

// TestMySQLReadOnlySessionIsClosed: a session whose write MySQL refuses as
// read-only (1792, a read-only transaction; 1290 for a read_only server
// takes the same path) is closed at once instead of going back to the
// pool.
func TestMySQLReadOnlySessionIsClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, table, _ := bridgetest.Outbox(t, "mysql")
	// The session variable is transaction_read_only on MySQL 8 and MariaDB
	// 11.1+, tx_read_only on older MariaDB.
	var db *outbox.DB
	var err error
	for _, variable := range []string{"transaction_read_only", "tx_read_only"} {
		if db, err = outbox.Open(ctx, withParams(t, url, variable, "1")); err == nil {
			break
		}
	}
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := outbox.NewStore(db, table)
	require.NoError(t, err)
	require.Equal(t, 1, db.SQL.Stats().OpenConnections)

	_, err = store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "k", Subject: "events.ro"})
	require.ErrorContains(t, err, "1792")
	require.Equal(t, 0, db.SQL.Stats().OpenConnections, "the read-only session was closed")
	require.NoError(t, db.CheckWritable(ctx), "the server itself accepts writes")
}

// TestMySQLDSNURL: the go-sql-driver DSN after mysql:// (the form of
// golang-migrate) opens the same database as the URL form; a bad one is
// refused naming both forms, without its password.
func TestMySQLDSNURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	raw, table, store := bridgetest.Outbox(t, "mysql")
	_, err := store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "dsn", Subject: "events.dsn"})
	require.NoError(t, err)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	dsn := "mysql://" + u.User.String() + "@tcp(" + u.Host + ")" + u.Path
	if u.RawQuery != "" {
		dsn += "?" + u.RawQuery
	}
	db, err := outbox.Open(ctx, dsn)
	require.NoError(t, err, dsn)
	t.Cleanup(func() { db.Close() })
	s, err := outbox.NewStore(db, table)
	require.NoError(t, err)
	st, err := s.Stats(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Rows[outbox.StatusPending])

	_, err = outbox.Open(ctx, "mysql://u:secret@tcp(h:3306")
	require.ErrorIs(t, err, outbox.ErrUnknownScheme)
	require.ErrorContains(t, err, "mysql://user:password@tcp(host:port)/database")
	require.NotContains(t, err.Error(), "secret")
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:secret@h/db":                  "postgres://u:REDACTED@h/db",
		"mysql://u:secret@tcp(h:3306)/db?a=b":       "mysql://u:REDACTED@tcp(h:3306)/db?a=b",
		"mysql://u:se@cr?et@tcp(h:3306)/db":         "mysql://u:REDACTED@tcp(h:3306)/db",
		"mysql://u:50%secret@h:3306/db":             "mysql://u:REDACTED@h:3306/db",
		"mysql://u@unix(/run/mysqld.sock)/db":       "mysql://u@unix(/run/mysqld.sock)/db",
		"postgres://h/db?password=secret&sslmode=x": "postgres://h/db?password=REDACTED&sslmode=x",
	} {
		got := outbox.RedactURL(in)
		require.Equal(t, want, got, in)
		require.NotContains(t, got, "secret")
	}
}

// TestSessionName: sessions are named "bridge <owner>", at most 63 bytes
// as PostgreSQL keeps.
func TestSessionName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "bridge relay-1", outbox.SessionName("relay-1"))
	require.Equal(t, "bridge", outbox.SessionName(""))
	ctx := context.Background()
	url := bridgetest.PostgresURL(t)
	db, err := outbox.OpenSession(ctx, url, outbox.Session{Name: "bridge " + strings.Repeat("x", 80)})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	var name string
	require.NoError(t, db.SQL.QueryRow("SELECT current_setting('application_name')").Scan(&name))
	require.Equal(t, "bridge "+strings.Repeat("x", 56), name)
}

// TestPostgresSessionsBeforeAReadOnlyRefusalAreRetired: once a session is
// refused a write as read-only, the idle sessions opened before it are not
// reused (they reach the same server, and one that began while the
// database was read-only stays so): statements run on new sessions.
func TestPostgresSessionsBeforeAReadOnlyRefusalAreRetired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, table, _ := bridgetest.Outbox(t, "postgres")
	admin, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	name := "bridge-fence-" + time.Now().Format("150405.000000")
	db, err := outbox.OpenSession(ctx, url, outbox.Session{Name: name})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SQL.SetMaxIdleConns(3)
	var conns []*sql.Conn
	for range 3 {
		c, err := db.SQL.Conn(ctx)
		require.NoError(t, err)
		require.NoError(t, c.PingContext(ctx))
		conns = append(conns, c)
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
	require.Equal(t, 3, sessions(t, admin, name))
	var pids []int
	rows, err := admin.Query("SELECT pid FROM pg_stat_activity WHERE application_name = $1", name)
	require.NoError(t, err)
	for rows.Next() {
		var pid int
		require.NoError(t, rows.Scan(&pid))
		pids = append(pids, pid)
	}
	require.NoError(t, rows.Err())

	tx, err := db.SQL.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	require.NoError(t, err)
	_, err = tx.Exec("DELETE FROM " + table)
	require.ErrorContains(t, err, "25006")
	_ = tx.Rollback()

	// Three sessions at once: no idle one from before the refusal is among
	// them.
	conns = conns[:0]
	for range 3 {
		c, err := db.SQL.Conn(ctx)
		require.NoError(t, err)
		var pid int
		require.NoError(t, c.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		require.NotContains(t, pids, pid, "a session opened before the refusal was reused")
		conns = append(conns, c)
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
}

// TestSessionsBounded: a PostgreSQL or MySQL pool opens at most
// SessionsMax sessions, so that a relay's need of server sessions behind a
// pooler in session mode is known (README, Connection poolers).
func TestSessionsBounded(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			_, _, store := bridgetest.Outbox(t, kind)
			require.Equal(t, outbox.SessionsMax, store.DB().SQL.Stats().MaxOpenConnections)
		})
	}
}

// TestConnectErrorOnce: a role the server refuses, with sslmode=prefer
// (libpq's and pgx's default) against a server that offers TLS, is tried
// over TLS and then in plain text; the error says so once, not once per
// attempt.
func TestConnectErrorOnce(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(bridgetest.PostgresURL(t))
	require.NoError(t, err)
	u.User = url.User("no_such_role_28")
	raw := withParams(t, u.String(), "sslmode", "prefer")
	_, err = outbox.Open(context.Background(), raw)
	require.Error(t, err)
	require.Equal(t, 1, strings.Count(err.Error(), `role "no_such_role_28" does not exist`), "%v", err)
}
