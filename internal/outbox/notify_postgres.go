package outbox

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyChannel is the PostgreSQL channel the outbox trigger (migration
// 00002) notifies after every inserting statement; the payload is the
// table name as configured.
const NotifyChannel = "outbox_bridge"

// NotifyProbeTimeout bounds the wait for the notification the listener
// sends itself after LISTEN.
const NotifyProbeTimeout = 5 * time.Second

// errNotificationsUnavailable: LISTEN succeeded, but a notification sent
// through the pool did not reach the LISTEN session.
var errNotificationsUnavailable = errors.New("a notification sent to the database did not reach the LISTEN session")

// ListenPostgres holds one session to the PostgreSQL database db (with the
// pool's session settings), LISTENs on NotifyChannel and calls wake for
// every notification about table, until ctx ends. Table names compare as
// PostgreSQL compares unquoted names, without regard to case.
//
// After each LISTEN it sends one notification through the pool and waits
// for it (NotifyProbeTimeout): behind a connection pooler in transaction or
// statement mode (PgBouncer's pooled endpoints) LISTEN succeeds but binds a
// server session that other clients then use, and nothing reaches the
// listener. When the probe does not arrive, it logs once that notifications
// are unavailable and returns: the relay polls every relay.poll_interval.
//
// A lost session is reopened after a backoff (up to 5 s) and followed by
// one wake, since notifications sent meanwhile are lost. Errors are logged:
// the poll interval keeps the relay going without notifications. Listening
// again after an interruption is logged once.
func ListenPostgres(ctx context.Context, db *DB, table string, wake func(), logger *slog.Logger) {
	backoff := 100 * time.Millisecond
	var interrupted time.Time // zero while listening, or before the first LISTEN
	listening := func() {
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
		if errors.Is(err, errNotificationsUnavailable) {
			logger.Warn("outbox notifications unavailable, as behind a connection pooler in transaction or statement mode; polling every relay.poll_interval instead",
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
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	ours := func(payload string) bool { return strings.EqualFold(payload, table) }
	if err := probeNotifications(ctx, db, conn, ours, wake); err != nil {
		return err
	}
	listening()
	wake() // rows may have arrived while not listening
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if ours(n.Payload) {
			wake()
		}
	}
}

// probeNotifications sends a notification with a random payload through
// the pool and waits for it on conn, which LISTENs; notifications about
// the table that arrive meanwhile wake the relay. It returns
// errNotificationsUnavailable when the probe does not arrive within
// NotifyProbeTimeout. pgx closes conn when the wait times out.
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
