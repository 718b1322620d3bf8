package postgreswal

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSweeperAppendsOnlyRowsTheSlotWillNotDeliver: the sweeper alone,
// against the table, with the test in the pipeline's place (answering its
// watermark and taking the rows it appends). Of the rows pending or failed
// and due when it reads, it appends those the pipeline does not hold when
// the watermark arrives and that are still unsettled then, in id order: not
// a row the pipeline holds, not one relayed between the read and the
// watermark (delivered by the slot meanwhile), not a row whose backoff has
// not ended, not a settled one; and a row a relay of source: table left in
// flight past the in-flight timeout is requeued and appended. Rounds go on
// while a round reads a whole batch.
func TestSweeperAppendsOnlyRowsTheSlotWillNotDeliver(t *testing.T) {
	t.Parallel()
	m := newMarkerTable(t, "postgres-logical")
	table := m.table
	db := m.db.SQL
	ids := map[string]int64{}
	for _, k := range []string{"free-1", "held", "relayed-meanwhile", "not-due", "done", "left-in-flight", "free-2", "free-3"} {
		ids[k] = m.insert(t, db, k, "events."+k)
	}
	exec := func(query string, args ...any) {
		t.Helper()
		_, err := db.Exec(query, args...)
		require.NoError(t, err)
	}
	exec(`UPDATE `+table+` SET status = 'failed', attempts = 1, available_at = now() + interval '1 hour' WHERE id = $1`, ids["not-due"])
	exec(`UPDATE `+table+` SET status = 'done' WHERE id = $1`, ids["done"])
	exec(`UPDATE `+table+` SET status = 'in_flight', owner = 'a relay of source: table', claimed_at = now() - interval '1 hour' WHERE id = $1`, ids["left-in-flight"])

	requests := make(chan sweepRequest)
	closing := make(chan struct{})
	defer close(closing)
	cfg := Config{Names: Names{Table: table, Slot: "sweeper_test"}}
	cfg.setDefaults()
	cfg.SweepBatch = 3 // two rounds over the six candidates, and one that reads none
	var swept, clock atomic.Int64
	sw := &sweeper{
		db: db, q: m.q, store: m.store, cfg: cfg, logger: slog.New(slog.NewTextHandler(io.Discard, nil)), swept: &swept, clockOffset: &clock,
		streaming: func() bool { return true }, asides: new(asideState),
		requests: requests, now: make(chan struct{}, 1), closing: closing, ctx: context.Background(),
	}
	result := make(chan error, 1)
	go func() { result <- sw.sweep(context.Background()) }()

	var appended []int64
	watermarks := 0
	for {
		select {
		case err := <-result:
			require.NoError(t, err)
			require.Equal(t, []int64{ids["free-1"], ids["left-in-flight"], ids["free-2"], ids["free-3"]}, appended,
				"the rows the slot will not deliver, in id order")
			require.Equal(t, int64(4), swept.Load())
			require.Equal(t, 2, watermarks, "a watermark per round that read rows")
			return
		case req := <-requests:
			switch {
			case req.token != "":
				// The watermark arrives (the sweeper wrote it into the log);
				// meanwhile the slot delivered a row the sweep read, and it
				// was relayed.
				watermarks++
				exec(`UPDATE `+table+` SET status = 'done' WHERE id = $1`, ids["relayed-meanwhile"])
				req.ids <- held{ids: map[int64]bool{ids["held"]: true}}
			case len(req.rows) > 0:
				for _, r := range req.rows {
					appended = append(appended, r.ID)
					require.NotEmpty(t, r.Payload, "row %d swept without its payload", r.ID)
				}
				close(req.appended)
			default:
				t.Fatalf("unexpected request %+v", req)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the sweep did not end")
		}
	}
}
