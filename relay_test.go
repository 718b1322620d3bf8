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
	"github.com/outbox-bridge/bridge/internal/source"
)

// TestNotificationWakesTheRelay runs the relay as wire assembles it, with a
// poll interval far longer than the test, on a table with the opt-in
// NOTIFY trigger (outbox.NotifyTriggerSQL): a row inserted after the relay
// has been idle for a while is relayed within seconds only because the
// trigger's NOTIFY wakes it (adaptive polling waits the poll interval
// once the table has been quiet).
func TestNotificationWakesTheRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, table := bridgetest.PostgresTable(t)
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = outbox.Migrate(ctx, db, table)
	require.NoError(t, err)
	optIn, err := outbox.NotifyTriggerSQL(table)
	require.NoError(t, err)
	_, err = db.SQL.ExecContext(ctx, optIn)
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
	signals := bridge.TableSignals(relay)
	signals.Listening, signals.Claimed = source.NewTestSignal[struct{}](), source.NewTestSignal[int]()
	moved := source.NewTestSignal[int]()
	bridge.Moved(relay, moved)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
		cleanup()
	})
	// No row before the first claim: it finds none and the claims then
	// wait the poll interval (1 h). Once the LISTEN session listens and
	// its start-up wake has claimed (nothing), only a notification wakes
	// the relay.
	// Two ticks of the claim loop, whatever their order with the LISTEN:
	// the first at start, and the one of the start-up wake (a wake that
	// comes while a tick runs is kept for the next). After both, with the
	// session listening, nothing but a notification wakes the claims.
	signals.Listening.Wait(t)
	require.Zero(t, signals.Claimed.Wait(t), "the first tick finds no row")
	require.Zero(t, signals.Claimed.Wait(t), "the start-up wake's tick finds no row")
	_, err = store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "row", Subject: "events.x", Payload: []byte("x")})
	require.NoError(t, err)
	waitDone(t, moved, store, 1)
}

// waitDone returns once store holds n done rows, asking after each time
// the rows of a relay moved (moved, set with bridge.Moved).
func waitDone(t *testing.T, moved *source.TestSignal[int], store *outbox.Store, n int64) {
	t.Helper()
	moved.WaitUntil(t, func() bool {
		st, err := store.Stats(context.Background(), 0)
		require.NoError(t, err)
		return st.Rows[outbox.StatusDone] == n
	}, "row not relayed within 5s although the poll interval is 1h")
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
