package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

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
	require.Eventually(t, func() bool { return len(messages(t, &logs)) >= 2 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{
		"WARN outbox notifications interrupted; polling meanwhile",
		"INFO outbox notifications restored",
	}, messages(t, &logs))
}
