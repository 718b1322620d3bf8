package outbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyChannel is the PostgreSQL channel the opt-in outbox trigger
// (NotifyTriggerSQL; migration 00002 installed it until 00004 removed it)
// notifies after every inserting statement; the payload is the table name
// as configured.
const NotifyChannel = "outbox_bridge"

// NotifyProbeTimeout bounds the wait for the notification the listener
// sends itself after LISTEN, and each heartbeat of the LISTEN session.
const NotifyProbeTimeout = 5 * time.Second

// listenHeartbeatMax is the longest the LISTEN session stays without a
// statement: a heartbeat (SELECT 1, bounded by NotifyProbeTimeout) tells a
// session whose server stopped answering, which would otherwise wait for
// notifications forever, and keeps the session from looking idle.
const listenHeartbeatMax = 30 * time.Second

// errNotificationsUnavailable: LISTEN succeeded, but a notification sent
// through the pool did not reach the LISTEN session.
var errNotificationsUnavailable = errors.New("a notification sent to the database did not reach the LISTEN session")

// errBehindPooler: the LISTEN session reaches the server through a
// connection pooler.
var errBehindPooler = errors.New("the database is reached through a connection pooler")

// ListenPostgres holds one session to the PostgreSQL database db (with the
// pool's session settings), LISTENs on NotifyChannel and calls wake for
// every notification about table, until ctx ends. Table names compare as
// PostgreSQL compares unquoted names, without regard to case.
//
// Behind a connection pooler it does not LISTEN: it logs once that
// notifications are unavailable and returns, and the relay polls every
// relay.poll_interval. A pooler in transaction or statement mode would
// leave the LISTEN on a server session of its pool, after this session's
// turn: notifications would then reach the pooler's other clients (psql
// prints them), and PgBouncer 1.18 mixed the answers of its clients' statements
// ("expected 0 arguments, got 6", a claim answered with one column; seen
// in TestPgBouncerTransactionMode run twice at once). A pooler is told by
// the process id the server announced at connect (BackendKeyData): a
// pooler announces its own, which is not the server's pg_backend_pid().
// Session pooling would allow LISTEN, but a pooler does not say its mode.
//
// After each LISTEN it sends one notification through the pool and waits
// for it (NotifyProbeTimeout); when it does not arrive (a pooler that
// passes the server's process id on), it UNLISTENs, logs once that
// notifications are unavailable and returns.
//
// The session runs SELECT 1 after every listenHeartbeatMax without
// statements (or half the server's idle_session_timeout, when shorter), bounded by
// NotifyProbeTimeout: a session whose server stopped answering is
// replaced, and idle_session_timeout does not end it.
//
// A lost session is reopened after a backoff (up to 5 s) and followed by
// one wake, since notifications sent meanwhile are lost. Errors are logged:
// the poll interval keeps the relay going without notifications. Listening
// again after an interruption is logged once.
func ListenPostgres(ctx context.Context, db *DB, table string, wake func(), logger *slog.Logger, onListen ...func()) {
	backoff := 100 * time.Millisecond
	var interrupted time.Time // zero while listening, or before the first LISTEN
	listening := func() {
		for _, f := range onListen {
			f()
		}
		backoff = 100 * time.Millisecond
		if !interrupted.IsZero() {
			logger.Info("outbox notifications restored", slog.Duration("interrupted_for", time.Since(interrupted).Round(time.Millisecond)))
			interrupted = time.Time{}
		}
	}
	for ctx.Err() == nil {
		err := listenOnce(ctx, db, table, wake, listening)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNotificationsUnavailable) || errors.Is(err, errBehindPooler) {
			logger.Warn("outbox notifications unavailable, as behind a connection pooler; polling every relay.poll_interval instead",
				slog.Any("error", err), slog.Duration("probe_timeout", NotifyProbeTimeout))
			return
		}
		if interrupted.IsZero() {
			interrupted = time.Now()
		}
		logger.Warn("outbox notifications interrupted; polling meanwhile", slog.Any("error", err), slog.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func listenOnce(ctx context.Context, db *DB, table string, wake, listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, db.pgConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	heartbeat, err := checkListenSession(ctx, conn)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	ours := func(payload string) bool { return strings.EqualFold(payload, table) }
	if err := probeNotifications(ctx, db, conn, ours, wake); err != nil {
		if errors.Is(err, errNotificationsUnavailable) {
			// The LISTEN may sit on a server session that outlives this
			// one; a session that holds no LISTEN ignores UNLISTEN.
			unlisten, cancel := context.WithTimeout(ctx, NotifyProbeTimeout)
			_, _ = conn.Exec(unlisten, "UNLISTEN *")
			cancel()
		}
		return err
	}
	listening()
	wake() // rows may have arrived while not listening
	for {
		wait, cancel := context.WithTimeout(ctx, heartbeat)
		n, err := conn.WaitForNotification(wait)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && wait.Err() != nil:
			// pgx keeps the session after a timeout (pgconn peekMessage).
			beat, cancel := context.WithTimeout(ctx, NotifyProbeTimeout)
			_, err = conn.Exec(beat, "SELECT 1")
			cancel()
			if err != nil {
				return fmt.Errorf("heartbeat of the LISTEN session: %w", err)
			}
		case err != nil:
			return err
		case ours(n.Payload):
			wake()
		}
	}
}

// checkListenSession returns errBehindPooler when conn reaches its server
// through a pooler (see ListenPostgres), and otherwise the heartbeat
// interval of the session: listenHeartbeatMax, or half the server's
// idle_session_timeout (PostgreSQL 14+) when shorter.
func checkListenSession(ctx context.Context, conn *pgx.Conn) (time.Duration, error) {
	var pid uint32
	var idleMillis int64
	err := conn.QueryRow(ctx, `SELECT pg_backend_pid(),
	coalesce((SELECT setting::bigint FROM pg_settings WHERE name = 'idle_session_timeout'), 0)`).Scan(&pid, &idleMillis)
	if err != nil {
		return 0, fmt.Errorf("read the LISTEN session's process id: %w", err)
	}
	if announced := conn.PgConn().PID(); pid != announced {
		return 0, fmt.Errorf("%w (the server's process id is %d, the connection announced %d)", errBehindPooler, pid, announced)
	}
	heartbeat := listenHeartbeatMax
	if idle := time.Duration(idleMillis) * time.Millisecond; idle > 0 {
		heartbeat = min(heartbeat, max(idle/2, 100*time.Millisecond))
	}
	return heartbeat, nil
}

// probeNotifications sends a notification with a random payload through
// the pool and waits for it on conn, which LISTENs; notifications about
// the table that arrive meanwhile wake the relay. It returns
// errNotificationsUnavailable when the probe does not arrive within
// NotifyProbeTimeout.
func probeNotifications(ctx context.Context, db *DB, conn *pgx.Conn, ours func(string) bool, wake func()) error {
	probe := "probe " + rand.Text()
	if _, err := db.SQL.ExecContext(ctx, "SELECT pg_notify($1, $2)", NotifyChannel, probe); err != nil {
		return err
	}
	wait, cancel := context.WithTimeout(ctx, NotifyProbeTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wait)
		switch {
		case err != nil && ctx.Err() == nil && wait.Err() != nil:
			return errNotificationsUnavailable
		case err != nil:
			return err
		case n.Payload == probe:
			return nil
		case ours(n.Payload):
			wake()
		}
	}
}

// NotifyTriggerSQL returns the SQL that makes every inserting statement on
// the PostgreSQL outbox table (optionally schema-qualified) notify
// NotifyChannel: the opt-in wake-up by notification, which `bridge migrate`
// no longer installs (migration 00004 removes the trigger of 00002). The
// relay's LISTEN session (ListenPostgres) then claims at once instead of
// on its next poll. Its cost falls on the producers: a transaction with a
// NOTIFY pending holds PostgreSQL's instance-wide notification lock while
// it commits (src/backend/commands/async.c, PreCommit_Notify), so the
// producing transactions of every database of the server commit one after
// the other, and PREPARE TRANSACTION fails in them ("cannot PREPARE a
// transaction that has executed LISTEN, UNLISTEN, or NOTIFY"). See
// docs/PRODUCERS.md. Errors: an invalid table name (ParseTableName).
func NotifyTriggerSQL(table string) (string, error) {
	t, err := ParseTableName(table)
	if err != nil {
		return "", err
	}
	rendered, err := renderSQLDir("optin", postgresDriver{}, t)
	if err != nil {
		return "", err
	}
	for _, r := range rendered {
		if r.file == "postgres_notify.sql" {
			return r.sql, nil
		}
	}
	return "", fmt.Errorf("embedded SQL optin/postgres_notify.sql is missing")
}
