package bridge_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestNotificationWakesTheRelay runs the relay as wire assembles it, with a
// poll interval far longer than the test: a row is relayed within
// milliseconds only because the PostgreSQL trigger's NOTIFY wakes it.
func TestNotificationWakesTheRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, table := bridgetest.PostgresTable(t)
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = outbox.Migrate(ctx, db, table)
	require.NoError(t, err)
	store, err := outbox.NewStore(db, table)
	require.NoError(t, err)

	n := bridgetest.StartNATS(t)
	cfg := config.Default()
	cfg.Database.URL, cfg.Database.Table = url, table
	cfg.NATS.URL = n.URL()
	cfg.Streams = []config.Stream{{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: time.Minute, Replicas: 1, Storage: "file"}}
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Relay.PollInterval = time.Hour
	require.NoError(t, cfg.Validate())

	relay, cleanup := newRelay(t, &cfg)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
		cleanup()
	})
	// The first tick and the listener's start-up wake have passed once an
	// empty claim happened; wait for a relayed probe row to be sure.
	_, err = store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "warm-up", Subject: "events.x", Payload: []byte("x")})
	require.NoError(t, err)
	waitDone(t, store, 1)

	for i := range 5 {
		_, err = store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "row-" + string(rune('a'+i)), Subject: "events.x", Payload: []byte("x")})
		require.NoError(t, err)
		waitDone(t, store, int64(i+2))
	}
}

func waitDone(t *testing.T, store *outbox.Store, n int64) {
	t.Helper()
	bridgetest.WaitFor(t, 5*time.Second, func() bool {
		st, err := store.Stats(context.Background(), 0)
		require.NoError(t, err)
		return st.Rows[outbox.StatusDone] == n
	}, "row not relayed within 5s although the poll interval is 1h: no notification")
}

// newRelay builds the relay of cfg as wire assembles it, with a health
// server that is bound but not served.
func newRelay(t *testing.T, cfg *config.Config) (*bridge.Relay, func()) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	hs, err := health.Listen(cfg.HTTP.Listen, logger)
	require.NoError(t, err)
	relay, cleanup, err := bridge.NewRelay(context.Background(), cfg, logger, hs)
	require.NoError(t, err)
	return relay, cleanup
}

// TestStopDuringAHealIsACleanStop: SIGTERM arrives while the relay's NATS
// connection is being closed for good (here: both at the moment the relay
// is built). The relay drains, and Serve reports a clean stop — exit 0,
// not the closed connection.
func TestStopDuringAHealIsACleanStop(t *testing.T) {
	n := bridgetest.StartNATS(t)
	cfg := config.Default()
	cfg.Database.URL = bridgetest.SQLiteURL(t)
	cfg.NATS.URL = n.URL()
	cfg.HTTP.Listen = "127.0.0.1:0"
	require.NoError(t, cfg.Validate())
	db, err := outbox.Open(context.Background(), cfg.Database.URL)
	require.NoError(t, err)
	_, err = outbox.Migrate(context.Background(), db, cfg.Database.Table)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	defer bridge.SetBuilt(func(d bridge.Daemon) {
		stop()
		d.(*bridge.Relay).Conn.Close()
	})()
	done := make(chan error, 1)
	go func() { done <- bridge.Serve(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	select {
	case err := <-done:
		require.NoError(t, err, "a stop asked for is a clean stop, closed connection or not")
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return")
	}
}
