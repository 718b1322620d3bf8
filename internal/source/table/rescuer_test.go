package table_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/source/table"
)

// relayAll runs a Subscriber over s that publishes every row, after
// enable has set its test signals (runSubscriber). It is closed when the
// test ends, if not before.
func relayAll(t *testing.T, s *outbox.Store, cfg table.SubscriberConfig, enable func(*table.Subscriber)) *table.Subscriber {
	t.Helper()
	return runSubscriber(t, s, cfg, func(d *source.Delivery) { d.Report(source.Published("S", 1, false)) }, enable)
}

// backdate moves column (a time) of row id two hours back: a lease of an
// hour (claimed_at) has ended, a done row (relayed_at) is older than a
// retention of an hour.
func backdate(t *testing.T, s *outbox.Store, column string, id int64) {
	t.Helper()
	q := "UPDATE " + s.Table() + " SET " + column + " = " + column + " - interval '2 hours' WHERE id = $1"
	switch s.DB().Dialect() {
	case "sqlite":
		q = "UPDATE " + s.Table() + " SET " + column + " = strftime('%Y-%m-%dT%H:%M:%fZ', " + column + ", '-2 hours') WHERE id = ?"
	case "mysql":
		q = "UPDATE " + s.Table() + " SET " + column + " = " + column + " - INTERVAL 2 HOUR WHERE id = ?"
	}
	res, err := s.DB().SQL.Exec(q, id)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

// TestRescuerRequeuesOnItsOwnInterval: in-flight recovery is a service of
// its own. A lease that ended while the subscriber runs is not requeued by
// its claims (before, every claim requeued first), but when the subscriber
// starts, and then every RescueInterval; the row is then relayed.
func TestRescuerRequeuesOnItsOwnInterval(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, kind)
			// A relay that crashed holds a row.
			first := enqueue(t, s, "first", "")
			require.Equal(t, []int64{first}, claimIDs(t, s, "crashed"))

			// Its lease ends while a subscriber claims: the claims leave
			// it alone.
			cfg := table.SubscriberConfig{InflightTimeout: time.Hour, RescueInterval: time.Hour}
			var rescued, claimed *source.TestSignal[int]
			sub := relayAll(t, s, cfg, func(sub *table.Subscriber) {
				rescued, claimed = table.RescueSignal(sub), table.ClaimSignal(sub)
			})
			require.Zero(t, rescued.Wait(t), "the lease had not ended when the subscriber started")
			backdate(t, s, "claimed_at", first)
			claimed.Clear()
			for range 3 {
				require.Zero(t, claimed.Wait(t))
			}
			r := get(t, s, first)
			require.Equal(t, "in_flight", r.Status, "a claim requeued the expired lease")
			require.Equal(t, "crashed", r.Owner.String)
			rescued.RequireNone(t, "in-flight recovery ran before its interval")
			require.NoError(t, sub.Close())
			require.Zero(t, sub.Counters.Requeued.Load())

			// A subscriber that starts requeues it at once.
			sub = relayAll(t, s, cfg, func(sub *table.Subscriber) { rescued = table.RescueSignal(sub) })
			require.Equal(t, 1, rescued.Wait(t), "the expired lease requeued at start")
			untilMarked(t, sub, func() bool { return get(t, s, first).Status == "done" }, "the requeued row relayed")
			require.Equal(t, int64(1), sub.Counters.Requeued.Load())
			require.NoError(t, sub.Close())

			// A lease that ends while a subscriber runs is requeued within
			// its RescueInterval.
			second := enqueue(t, s, "second", "")
			require.Equal(t, []int64{second}, claimIDs(t, s, "crashed"))
			cfg.RescueInterval = 50 * time.Millisecond
			sub = relayAll(t, s, cfg, func(sub *table.Subscriber) { rescued = table.RescueSignal(sub) })
			require.Zero(t, rescued.Wait(t))
			backdate(t, s, "claimed_at", second)
			start := time.Now()
			for moved := 0; moved == 0; moved = rescued.Wait(t) {
			}
			require.Less(t, time.Since(start), 5*time.Second, "requeued within a few intervals")
			untilMarked(t, sub, func() bool { return get(t, s, second).Status == "done" }, "the requeued row relayed")
			require.Equal(t, int64(1), sub.Counters.Requeued.Load())
			st, err := s.Stats(ctx, 0)
			require.NoError(t, err)
			require.Equal(t, int64(2), st.Rows[outbox.StatusDone])
		})
	}
}

// TestSubscriberRunsRetention: with Retention set, the subscriber deletes
// done rows older than it, and keeps the others.
func TestSubscriberRunsRetention(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := setup(t, kind)
			old, fresh := enqueue(t, s, "old", ""), enqueue(t, s, "fresh", "")
			require.Len(t, claimIDs(t, s, "r"), 2)
			_, err := s.MarkDone(context.Background(), "r", []outbox.Done{{ID: old, Attempt: 1, Stream: "S", Seq: 1}, {ID: fresh, Attempt: 1, Stream: "S", Seq: 2}}, false)
			require.NoError(t, err)
			backdate(t, s, "relayed_at", old)
			var purged *source.TestSignal[int]
			relayAll(t, s, table.SubscriberConfig{Retention: time.Hour}, func(sub *table.Subscriber) { purged = table.RetentionSignal(sub) })
			purged.WaitUntil(t, func() bool {
				st, err := s.Stats(context.Background(), 0)
				require.NoError(t, err)
				return st.Rows[outbox.StatusDone] == 1
			}, "the old done row deleted")
			require.Equal(t, "done", get(t, s, fresh).Status)
		})
	}
}
