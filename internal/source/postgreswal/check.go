package postgreswal

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// The check of rows another run may have relayed.
//
// A replication session starts from the slot's confirmed position, which
// lags what the relay (this process before a restart, or another one that
// held the slot) published and marked: the position moves past a
// transaction only once its rows are marked and the server was told. So a
// session reads again rows that the table already records as relayed, and
// rows published whose marks were not written yet (a SIGKILL). Within the
// stream's duplicate window JetStream drops their repeats by Nats-Msg-Id;
// after it, it would store them again.
//
// Every row of a transaction that committed before the session started
// (below checkBelow, the server's WAL position once the slot was
// acquired: no earlier holder can have read past it) is therefore checked
// against its row in the table before it is published, in batches of up
// to markBatchMax by a goroutine of its own (the checker), while the rows
// read after it wait (commit order). Rows committed after the session
// started, the steady state, are not checked: no other run can have read
// them.
//
//   - done or permanent_failed: settled, not published (the mark is there);
//   - gone (deleted) and visible: settled, not published — deleted after
//     its PubAck (relay.delete_on_relay), or by an operator before it was
//     relayed, as the table source would not publish it either; except in
//     wal.rows_deleted_by_producer mode, where the table never holds them
//     (treated as unsettled below);
//   - gone and not yet visible (its commit is decoded before it is
//     visible): checked again;
//   - unsettled (pending, failed, in_flight): it may have been published
//     by the earlier run at any time after its commit. When its commit is
//     older than the stream's duplicate window allows (dedup.Reconciler
//     InDoubt, with the commit time as its first publish), its stream is
//     scanned for its Nats-Msg-Id from its commit on, as the table source
//     does for a row claimed again (internal/dedup reconcile); a row found
//     there is marked done with the stream and sequence found, without a
//     publish. The others are published.
//
// The check costs one query per batch (and a stream scan only for rows
// older than their stream's duplicate window), only for the backlog a
// session starts with.

// checkItem is a row to check, copied from its entry by the pipeline.
type checkItem struct {
	e              *entry
	id             int64
	xid            uint32
	txTime         time.Time // commit time, database clock
	subject, idKey string
}

// verdict is what the check found for a row.
type verdict int

const (
	publishRow   verdict = iota // unsettled and not found in its stream: publish it
	settledRow                  // done, dead, or deleted: settled without a publish
	storedRow                   // found in its stream: mark it done with stream and seq
	notVisibleRw                // not visible yet: check it again
)

// checkResult is the verdict on one row, for the pipeline.
type checkResult struct {
	e      *entry
	v      verdict
	stream string
	seq    uint64
}

// checker checks the rows the pipeline queues (checks), in batches, and
// hands the verdicts back (checked), until the queue is closed and empty or
// the Subscriber closes.
type checker struct {
	db     *sql.DB
	q      outbox.WALStatements
	cfg    Config // RowsDeletedByProducer, Reconciler
	logger *slog.Logger
	// checked counts the rows found settled (Counters.Checked).
	checked     *atomic.Int64
	clockOffset *atomic.Int64 // server clock minus this process's, ns
	in          *queue[checkItem]
	out         *queue[checkResult]
	closing     <-chan struct{}
	writes      dbRetry
}

// checker returns the Subscriber's checker, between its queues.
func (s *Subscriber) checker() *checker {
	return &checker{
		db: s.db.SQL, q: s.q, cfg: s.cfg, logger: s.logger, checked: &s.Counters.Checked, clockOffset: &s.stream.clockOffset,
		in: s.checks, out: s.checked, closing: s.closing, writes: s.dbRetry(&s.checkReads),
	}
}

// run checks rows until the queue is closed and empty, or the Subscriber
// closes.
func (c *checker) run() {
	for {
		items, ok := c.in.wait()
		if !ok || source.Closed(c.closing) {
			return // what is unchecked stays unconfirmed: the next run reads it again
		}
		for len(items) > 0 {
			n := min(len(items), markBatchMax)
			var results []checkResult
			if !c.writes.retry(n, func(ctx context.Context) error {
				var err error
				results, err = c.check(ctx, items[:n])
				return err
			}) {
				return
			}
			var again []checkItem
			for i, r := range results {
				if r.v == notVisibleRw {
					again = append(again, items[i])
				}
			}
			c.out.push(results...)
			items = items[n:]
			if len(again) > 0 {
				items = append(items, again...)
				select {
				case <-time.After(10 * time.Millisecond):
				case <-c.writes.ctx.Done():
					return
				}
			}
		}
	}
}

// check reads the rows of items from the table (one statement, after a
// snapshot: a row gone whose transaction that snapshot sees is gone for
// good) and scans their streams for the unsettled ones in doubt. Results
// are in the order of items.
func (c *checker) check(ctx context.Context, items []checkItem) ([]checkResult, error) {
	ids := make([]int64, len(items))
	for i, it := range items {
		ids[i] = it.id
	}
	var snapText string
	if err := c.db.QueryRowContext(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snapText); err != nil {
		return nil, fmt.Errorf("check outbox rows read again: snapshot: %w", err)
	}
	snap, err := parseSnapshot(snapText)
	if err != nil {
		return nil, err
	}
	rows, err := c.db.QueryContext(ctx, c.q.Reread, ids)
	if err != nil {
		return nil, fmt.Errorf("check %d outbox rows read again: %w", len(ids), err)
	}
	status := make(map[int64]string, len(ids))
	func() {
		defer rows.Close()
		for rows.Next() {
			var id, seq int64
			var st, stream string
			if err = rows.Scan(&id, &st, &stream, &seq); err != nil {
				return
			}
			status[id] = st
		}
		err = rows.Err()
	}()
	if err != nil {
		return nil, fmt.Errorf("check %d outbox rows read again: %w", len(ids), err)
	}
	results := make([]checkResult, len(items))
	var candidates []dedup.Candidate
	at := map[int64]int{}
	now := time.Now().Add(time.Duration(c.clockOffset.Load())) // database clock
	settledN := 0
	for i, it := range items {
		results[i] = checkResult{e: it.e, v: publishRow}
		st, present := status[it.id]
		switch {
		case st == "done" || st == "permanent_failed":
			results[i].v = settledRow
			settledN++
			continue
		case !present && c.cfg.RowsDeletedByProducer:
			// The table never holds them: unsettled as far as anyone knows.
		case !present && it.xid != 0 && !snap.visible(it.xid):
			results[i].v = notVisibleRw
			continue
		case !present:
			results[i].v = settledRow
			settledN++
			continue
		}
		if c.cfg.Reconciler == nil {
			continue
		}
		candidates = append(candidates, dedup.Candidate{ID: it.id, IdempotencyKey: it.idKey, Subject: it.subject, FirstClaimedAt: it.txTime, ClaimedAt: now})
		at[it.id] = i
	}
	if len(candidates) > 0 {
		found, _ := source.FindInDoubt(ctx, c.cfg.Reconciler, candidates, c.logger, "check")
		for id, stored := range found {
			r := &results[at[id]]
			r.v, r.stream, r.seq = storedRow, stored.Stream, stored.Seq
		}
	}
	if settledN > 0 {
		c.checked.Add(int64(settledN))
		c.logger.Info("rows read again are settled in the table; not published again", slog.Int("rows", settledN))
	}
	return results, nil
}
