package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// messages returns the level and message of each JSON log record.
func messages(t *testing.T, logs *bridgetest.SyncBuffer) []string {
	t.Helper()
	var out []string
	for _, r := range logs.Records(t) {
		out = append(out, fmt.Sprint(r["level"], " ", r["msg"]))
	}
	return out
}

// TestListenPostgresLogsRestore: when the LISTEN connection is killed, the
// listener warns that notifications are interrupted, and says once when it
// listens again; the first LISTEN is not announced.
func TestListenPostgresLogsRestore(t *testing.T) {
	t.Parallel()
	url, table := bridgetest.PostgresTable(t)
	app := fmt.Sprintf("bridge_listen_%d", time.Now().UnixNano())
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	var logs bridgetest.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	woken := make(chan struct{}, 1)
	wake := func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	}
	waitWake := func(what string) {
		t.Helper()
		select {
		case <-woken:
		case <-time.After(30 * time.Second):
			t.Fatalf("no wake %s; log: %q", what, messages(t, &logs))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	db, err := outbox.Open(ctx, url+sep+"application_name="+app)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		outbox.ListenPostgres(ctx, db, table, wake, logger)
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitWake("after the first LISTEN")
	require.Empty(t, messages(t, &logs), "the first LISTEN logs nothing")

	admin, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	var killed int
	require.NoError(t, admin.QueryRow("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'", app).Scan(&killed))
	require.Equal(t, 1, killed)

	waitWake("after listening again")
	bridgetest.WaitFor(t, 30*time.Second, func() bool { return len(messages(t, &logs)) >= 2 })
	require.Equal(t, []string{
		"WARN outbox notifications interrupted; polling meanwhile",
		"INFO outbox notifications restored",
	}, messages(t, &logs))
}

// TestListenPostgresBehindPoolerLeavesNoListen: behind PgBouncer in
// transaction mode the listener says that notifications are unavailable
// and leaves no LISTEN in the pooler's server sessions: with one server
// session in the pool, a client of the pooler that notifies the channel
// receives nothing. A LISTEN left there reaches every client of the
// pooler, and PgBouncer 1.18 mixed up its clients' answers
// (TestPgBouncerTransactionMode run twice at once).
func TestListenPostgresBehindPoolerLeavesNoListen(t *testing.T) {
	t.Parallel()
	direct := bridgetest.PostgresDatabase(t)
	pooled := bridgetest.StartPgBouncer(t, direct, "transaction", 1)
	var logs bridgetest.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := outbox.Open(ctx, pooled)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	outbox.ListenPostgres(ctx, db, "outbox", func() {}, logger)
	require.NoError(t, ctx.Err(), "the listener returns behind a pooler")
	logged := messages(t, &logs)
	require.Len(t, logged, 1)
	require.Contains(t, logged[0], "WARN outbox notifications unavailable, as behind a connection pooler")

	cfg, err := pgx.ParseConfig(pooled)
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	var received []string
	cfg.OnNotification = func(_ *pgconn.PgConn, n *pgconn.Notification) { received = append(received, n.Payload) }
	client, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close(context.Background()) })
	for range 3 {
		_, err = client.Exec(ctx, "SELECT pg_notify($1, 'leak')", outbox.NotifyChannel)
		require.NoError(t, err)
		_, err = client.Exec(ctx, "SELECT 1")
		require.NoError(t, err)
	}
	require.Empty(t, received, "a client of the pooler received notifications: a LISTEN was left in the pool")
}

// TestListenPostgresOutlivesIdleSessionTimeout: with a database default
// idle_session_timeout of 1 s, the LISTEN session's heartbeat keeps it
// from being ended: no interruption is logged while the listener runs
// for 5 s, and a notification still wakes it. Before, the server ended the
// session every second and notifications sent meanwhile were lost.
func TestListenPostgresOutlivesIdleSessionTimeout(t *testing.T) {
	t.Parallel()
	dbURL := bridgetest.PostgresDatabase(t)
	admin, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	_, err = admin.Exec("ALTER DATABASE " + strings.TrimPrefix(u.Path, "/") + " SET idle_session_timeout = '1s'")
	require.NoError(t, err)
	var logs bridgetest.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	woken := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	db, err := outbox.Open(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		outbox.ListenPostgres(ctx, db, "outbox", func() { woken <- struct{}{} }, logger)
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-woken: // the wake after the first LISTEN
	case <-time.After(30 * time.Second):
		t.Fatalf("no wake after the first LISTEN; log: %q", messages(t, &logs))
	}
	<-time.After(5 * time.Second)
	_, err = admin.Exec("SELECT pg_notify($1, 'outbox')", outbox.NotifyChannel)
	require.NoError(t, err)
	select {
	case <-woken:
	case <-time.After(30 * time.Second):
		t.Fatalf("a notification did not wake the listener; log: %q", messages(t, &logs))
	}
	require.Empty(t, messages(t, &logs), "the LISTEN session was interrupted")
}
