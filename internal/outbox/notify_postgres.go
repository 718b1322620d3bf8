package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyChannel is the PostgreSQL channel the outbox trigger (migration
// 00002) notifies after every inserting statement; the payload is the
// table name as configured.
const NotifyChannel = "outbox_bridge"

// ListenPostgres holds one connection to the PostgreSQL database at url,
// LISTENs on NotifyChannel and calls wake for every notification about
// table, until ctx ends. A lost connection is reopened after a backoff (up
// to 5 s) and followed by one wake, since notifications sent meanwhile are
// lost. Errors are logged: the poll interval keeps the relay going without
// notifications. Listening again after an interruption is logged once.
func ListenPostgres(ctx context.Context, url, table string, wake func(), logger *slog.Logger) {
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
		err := listenOnce(ctx, url, table, wake, listening)
		if ctx.Err() != nil {
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

func listenOnce(ctx context.Context, url, table string, wake, listening func()) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	listening()
	wake() // rows may have arrived while not listening
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == table {
			wake()
		}
	}
}
