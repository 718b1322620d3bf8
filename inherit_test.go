package bridge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder/watermillforwardertest"
)

// TestInheritAcrossARebuild, for every source: when the relay's NATS
// connection is closed for good, Serve builds the relay again, and the new
// one goes on from what the old one saw: its counters (6 rows relayed),
// its stall (NATS down while a row waits, relay.stall_after 1s) and the
// duplicate-window guard's finding (a stream with a 1 s window, found
// once, dedup.guard warn). The new relay is read as Serve hands it over,
// before it runs; then it relays the row that waited, and its count goes
// on from 6. Before, the postgres-wal relay started its counters from zero.
func TestInheritAcrossARebuild(t *testing.T) {
	for _, source := range []string{config.SourceTable, config.SourcePostgresWAL, config.SourceWatermillForwarder} {
		// Not parallel: SetBuilt's hook is one for the process.
		t.Run(source, func(t *testing.T) {
			ctx := context.Background()
			n := bridgetest.StartNATS(t)
			_, js := n.JetStream(t)
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SHORT", Subjects: []string{"short.>"}, Duplicates: time.Second})
			require.NoError(t, err)

			publish := inheritSource(t, source, n.URL())
			cfg := publish.cfg
			cfg.Relay.StallAfter = time.Second
			cfg.Relay.PollInterval = 50 * time.Millisecond
			cfg.Dedup.Guard = config.GuardWarn // the finding is counted; the row is relayed
			require.NoError(t, cfg.Validate())

			built := make(chan bridge.Daemon, 2)
			seen := make(chan bridge.Observed, 2)
			defer bridge.SetBuilt(func(d bridge.Daemon) {
				seen <- bridge.Observe(d) // before it runs: what it inherited
				built <- d
			})()
			runCtx, stop := context.WithCancel(ctx)
			served := make(chan error, 1)
			go func() { served <- bridge.Serve(runCtx, &cfg, discardLogger()) }()
			defer func() {
				stop()
				select {
				case err := <-served:
					require.NoError(t, err)
				case <-time.After(30 * time.Second):
					t.Error("Serve did not return")
				}
			}()
			first := <-built
			require.Zero(t, (<-seen).Relayed, "the first relay starts from zero")

			for i := range 5 {
				publish.row(t, fmt.Sprint("ok-", i), "events.ok")
			}
			publish.row(t, "short", "short.x")
			// This test polls on purpose: a stall is found by the stall
			// watch's own clock (relay.stall_after), and the guard's verdict
			// on a stream may come after the rows' marks, so no one signal
			// marks the moment each condition turns true.
			bridgetest.WaitFor(t, 60*time.Second, func() bool {
				o := bridge.Observe(first)
				return o.Relayed == 6 && o.Violations >= 1
			}, "six rows relayed and the stream SHORT found unsafe")

			n.Stop()
			publish.row(t, "waited", "events.ok")
			if source != config.SourceWatermillForwarder {
				bridgetest.WaitFor(t, 30*time.Second, func() bool { return bridge.Observe(first).Stalled > 0 },
					"a stall while NATS is down and a row waits")
			}
			before := bridge.Observe(first)
			bridge.CloseNATS(first)
			n.Restart(t)

			second := <-built
			inherited := <-seen
			require.True(t, first != second, "a new relay")
			require.Equal(t, before.Relayed, inherited.Relayed, "counters go on")
			require.Equal(t, before.Violations, inherited.Violations, "the guard's finding, counted once")
			require.GreaterOrEqual(t, inherited.Stalled, before.Stalled, "the stall goes on from when it began")

			bridgetest.WaitFor(t, 60*time.Second, func() bool { return bridge.Observe(second).Relayed == 7 },
				"the row that waited relayed by the new relay, counted after the six")
		})
	}
}

// inheritTarget is a source's configuration and how its service writes a
// row.
type inheritTarget struct {
	cfg config.Config
	row func(t *testing.T, key, subject string)
}

// inheritSource prepares source's database side and configuration.
func inheritSource(t *testing.T, source, natsURL string) inheritTarget {
	t.Helper()
	ctx := context.Background()
	if source == config.SourceWatermillForwarder {
		url := bridgetest.PostgresURL(t)
		svc := watermillforwardertest.NewService(t, url)
		cfg := relayConfig(t, url, config.TableDefault, natsURL)
		cfg.Source = source
		cfg.Watermill.ForwarderTopic = svc.Topic
		db, err := outbox.Open(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		_, _, err = watermillforwarder.Migrate(ctx, db, svc.Topic)
		require.NoError(t, err)
		return inheritTarget{cfg: cfg, row: func(t *testing.T, key, subject string) {
			m := message.NewMessage(watermill.NewUUID(), []byte(key))
			require.NoError(t, svc.Publish(ctx, true, subject, m))
		}}
	}
	cfg, store := postgresSourceConfig(t, source, natsURL)
	return inheritTarget{cfg: cfg, row: func(t *testing.T, key, subject string) {
		_, err := store.Enqueue(ctx, outbox.Entry{IdempotencyKey: key, Subject: subject, Payload: []byte(key)})
		require.NoError(t, err)
	}}
}
