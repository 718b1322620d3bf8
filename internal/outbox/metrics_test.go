package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// gauges gathers reg within a few seconds (failing the test otherwise) and
// returns its unlabelled gauges by name.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	type result struct {
		out map[string]float64
		err error
	}
	ch := make(chan result, 1)
	go func() {
		mfs, err := reg.Gather()
		out := map[string]float64{}
		for _, mf := range mfs {
			if m := mf.GetMetric(); len(m) == 1 && m[0].GetGauge() != nil {
				out[mf.GetName()] = m[0].GetGauge().GetValue()
			}
		}
		ch <- result{out, err}
	}()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.out
	case <-time.After(3 * time.Second):
		require.FailNow(t, "a scrape waited for the table")
		return nil
	}
}

// TestTableCollectorNeverWaitsForTheTable: while the outbox table cannot
// be read (locked here; a database down or SQLite's write lock alike), a
// scrape answers at once with the last values, says how old they are, and
// the lag keeps growing instead of freezing at a value that looks healthy.
func TestTableCollectorNeverWaitsForTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, table, store := bridgetest.Outbox(t, "postgres")
	_, err := store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "k", Subject: "events.x", Payload: []byte("x")})
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(outbox.NewTableCollector(store, 100*time.Millisecond))
	fresh := gauges(t, reg)
	require.Less(t, fresh["bridge_outbox_stats_age_seconds"], 1.0)

	tx, err := store.DB().SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	_, err = tx.Exec("LOCK TABLE " + table + " IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	var stale map[string]float64
	for range 10 { // scrapes while reads of the table hang
		stale = gauges(t, reg)
		time.Sleep(100 * time.Millisecond)
	}
	require.GreaterOrEqual(t, stale["bridge_outbox_stats_age_seconds"], 0.9, "%v", stale)
	require.GreaterOrEqual(t, stale["bridge_relay_lag_seconds"], fresh["bridge_relay_lag_seconds"]+0.9, "the lag froze while the table could not be read: %v", stale)
	require.NoError(t, tx.Rollback())
}

// TestLagCountsRowsInFlight: a row that is claimed again and again (its
// lease lost each time, a requeue loop) is in flight most of the time; the
// lag counts it, or a row stuck that way would look like no lag at all.
func TestLagCountsRowsInFlight(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			_, _, store := bridgetest.Outbox(t, kind)
			_, err := store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "k", Subject: "events.x", Payload: []byte("x")})
			require.NoError(t, err)
			time.Sleep(300 * time.Millisecond)
			rows, err := store.Claim(ctx, "relay-1", 10)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			st, err := store.Stats(ctx, 0)
			require.NoError(t, err)
			require.Equal(t, int64(1), st.Rows[outbox.StatusInFlight])
			require.GreaterOrEqual(t, st.OldestUnsettled, 300*time.Millisecond, "the row in flight is not in the lag")
		})
	}
}

// TestErrorsQuoteRowsWholeRunes: a row's text quoted in an error is cut at
// a rune boundary, never inside a multi-byte character.
func TestErrorsQuoteRowsWholeRunes(t *testing.T) {
	t.Parallel()
	for i := range 4 { // every offset of the cut within a 2-byte rune
		_, err := outbox.ParseHeaders([]byte(`{"X": {"v": "` + strings.Repeat("a", i) + strings.Repeat("é", 60) + `"}}`))
		require.Error(t, err)
		require.True(t, utf8.ValidString(err.Error()), "%q", err.Error())
	}
	err := outbox.CheckSubject("events." + strings.Repeat("é", 2100))
	require.True(t, utf8.ValidString(err.Error()), "%q", err.Error())
}
