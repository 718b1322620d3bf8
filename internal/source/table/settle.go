package table

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// settleBatchMax bounds the rows written by one settlement flush.
const settleBatchMax = 1000

// settlement is the outcome of one claimed row.
type settlement struct {
	row outbox.Row // without its payload
	// size is what the row took in memory when claimed (outbox.Row.size), given
	// back to relay.max_in_flight_bytes once the settlement is written.
	size      int64
	done      bool
	stream    string
	seq       uint64
	duplicate bool
	err       string
	permanent bool
	refund    bool
	held      bool
	holdFor   time.Duration // a held row's wait; 0: HoldBack
}

// settled starts the settlement of row: the row without its payload, which
// the settle loop does not need and should not keep.
func settled(row outbox.Row) settlement {
	size := row.Size()
	row.Payload = nil
	return settlement{row: row, size: size}
}

// settle queues st for the settle loop. Once the loop has ended (the
// subscriber closed after its drain gave up: a batch whose outcome comes
// later, a table dropped with rows in flight) st is dropped: its row stays
// in flight until its lease expires, as the drain said, and the relay
// goes on (a send on the closed channel here ended the process: a
// newcomer's trial, a tenant dropped mid-backlog).
func (s *Subscriber) settle(st settlement) {
	select {
	case s.settleCh <- st:
	case <-s.settleEnded:
	}
}

// settleLoop writes settlements in batches: it blocks for the first, takes
// whatever else is already queued, writes them, and repeats. Under load
// batches grow; when idle a settlement is written at once. Once settleStop
// is closed it writes what is queued and returns.
func (s *Subscriber) settleLoop() {
	defer close(s.settleEnded)
	batch := make([]settlement, 0, settleBatchMax)
	for {
		var first settlement
		select {
		case first = <-s.settleCh:
		case <-s.settleStop:
			select {
			case first = <-s.settleCh:
			default:
				return // nothing queued
			}
		}
		batch = append(batch[:0], first)
	fill:
		for len(batch) < settleBatchMax {
			select {
			case st := <-s.settleCh:
				batch = append(batch, st)
			default:
				break fill
			}
		}
		s.flush(batch)
		var size int64
		for i := range batch {
			size += batch[i].size
			batch[i] = settlement{} // let go of the rows until the next batch
		}
		s.outstanding.Add(-int64(len(batch)))
		s.outstandingBytes.Add(-size)
		s.Signals.Marked.Signal(len(batch))
		s.Wake()
		s.cfg.Budget.freed()
	}
}

// flush writes one batch, retrying while the database is unreachable.
func (s *Subscriber) flush(batch []settlement) {
	done := s.doneBuf[:0]
	defer func() { s.doneBuf = done[:0] }()
	var failures []outbox.Failure
	var duplicates int64
	for _, st := range batch {
		if st.done {
			done = append(done, outbox.Done{ID: st.row.ID, Attempt: st.row.Attempt, Stream: st.stream, Seq: st.seq})
			if st.duplicate {
				duplicates++
			}
			continue
		}
		failures = append(failures, s.failure(st))
	}
	s.logFailures(failures)
	start := time.Now()
	s.retry(len(batch), func() error { return s.writeDone(done, duplicates) })
	s.retry(len(batch), func() error { return s.writeFailures(failures) })
	s.logger.Debug("settled", slog.Int("done", len(done)), slog.Int("failed", len(failures)), slog.Duration("took", time.Since(start)))
}

// retry runs write until it succeeds, waiting longer after each failure. It
// gives up when hardCtx ends (unwritten rows then stay in_flight, and
// in-flight recovery requeues them after their lease) and when the table
// no longer exists.
func (s *Subscriber) retry(rows int, write func() error) {
	for attempt, wait := 1, 100*time.Millisecond; ; attempt, wait = attempt+1, min(wait*2, 5*time.Second) {
		err := write()
		if err == nil {
			return
		}
		if outbox.IsMissingTable(err) && s.tableIsGone() {
			// The table is gone (dropped: a tenant let go), and its rows
			// with it: nothing to retry, and the drain need not wait.
			level := slog.LevelDebug
			if !s.tableGone.Swap(true) {
				level = slog.LevelWarn // once: every batch in flight comes here
			}
			s.logger.Log(s.hardCtx, level, "settlements not written: the outbox table no longer exists (dropped?), and its rows went with it", slog.Int("rows", rows), slog.Any("error", err))
			return
		}
		if s.hardCtx.Err() != nil {
			s.logger.Error("settlements not written; rows stay in_flight until their lease expires",
				slog.Int("rows", rows), slog.Any("error", err))
			return
		}
		level := outbox.FailureLevel(err)
		if outbox.IsLockTimeout(err) && attempt < source.FailingAfter {
			// A mark waits on rows that another relay's claim holds
			// locked for a moment; with a short lock_timeout (a database
			// default) it gives up and the next try passes.
			level = slog.LevelWarn
		}
		s.logger.Log(s.hardCtx, level, "write settlements", slog.Int("rows", rows), slog.Int("attempt", attempt), slog.Any("error", err), slog.Duration("retry_in", wait))
		select {
		case <-time.After(wait):
		case <-s.hardCtx.Done():
		}
	}
}

func (s *Subscriber) writeDone(done []outbox.Done, duplicates int64) error {
	if len(done) == 0 {
		return nil
	}
	var n int64
	err := s.statement(s.hardCtx, &s.marks, func(ctx context.Context) (err error) {
		n, err = s.store.MarkDone(ctx, s.cfg.Owner, done, s.cfg.DeleteOnRelay)
		return err
	})
	if err != nil {
		return err
	}
	s.Counters.Relayed.Add(n)
	s.Counters.Deduplicated.Add(duplicates)
	s.fenced(len(done), n)
	return nil
}

func (s *Subscriber) writeFailures(failures []outbox.Failure) error {
	if len(failures) == 0 {
		return nil
	}
	var n int64
	err := s.statement(s.hardCtx, &s.marks, func(ctx context.Context) (err error) {
		n, err = s.store.MarkFailed(ctx, s.cfg.Owner, failures)
		return err
	})
	if err != nil {
		return err
	}
	for _, f := range failures {
		switch {
		case f.Permanent:
			s.Counters.Dead.Add(1)
		case f.Held:
			s.Counters.Held.Add(1)
		case f.Refund:
			s.Counters.Released.Add(1)
		default:
			s.Counters.Failed.Add(1)
		}
	}
	s.fenced(len(failures), n)
	return nil
}

// fenced counts and logs marks that matched no row: another relay took
// the lease over (requeue after inflight_timeout, then a new claim), and
// its result wins.
func (s *Subscriber) fenced(want int, got int64) {
	if lost := int64(want) - got; lost > 0 {
		s.Counters.Fenced.Add(lost)
		s.logger.Warn("marks matched no row: lease lost to in-flight recovery", slog.Int64("rows", lost))
	}
}

// failure turns a failed settlement into the row's next state.
func (s *Subscriber) failure(st settlement) outbox.Failure {
	f := outbox.Failure{ID: st.row.ID, Attempt: st.row.Attempt, Err: st.err, Permanent: st.permanent, Refund: st.refund || st.held, Held: st.held}
	switch {
	case f.Held:
		f.Backoff = cmp.Or(st.holdFor, s.cfg.HoldBack)
	case f.Permanent, f.Refund:
	case st.row.Attempt >= s.cfg.MaxAttempts:
		f.Permanent = true
		f.Err = fmt.Sprintf("gave up after %d attempts (relay.max_attempts); last error: %s", st.row.Attempt, st.err)
	default:
		f.Backoff = s.backoff(st.row.Attempt)
	}
	return f
}

// logFailures logs a batch's failures: each dead letter on its own line,
// the others as one line per kind with the first row's error.
func (s *Subscriber) logFailures(failures []outbox.Failure) {
	var retry, released, held []outbox.Failure
	for _, f := range failures {
		switch {
		case f.Permanent:
			s.logger.Warn("row is a dead letter", slog.Int64("row_id", f.ID), slog.Int("attempt", f.Attempt), slog.String("error", f.Err))
		case f.Held:
			held = append(held, f)
		case f.Refund:
			released = append(released, f)
		default:
			retry = append(retry, f)
		}
	}
	if len(retry) > 0 {
		s.logger.Warn("publish failed, will retry after backoff", slog.Int("rows", len(retry)),
			slog.Int64("first_row_id", retry[0].ID), slog.Int("attempt", retry[0].Attempt), slog.String("error", retry[0].Err))
	}
	if len(held) > 0 {
		// Whoever holds them back (the duplicate-window guard) logs why,
		// once per stream.
		s.logger.Debug("rows held back without counting the attempt", slog.Int("rows", len(held)),
			slog.Int64("first_row_id", held[0].ID), slog.Duration("retry_in", s.cfg.HoldBack), slog.String("reason", held[0].Err))
	}
	if len(released) > 0 {
		s.logger.Info("rows released without counting the attempt", slog.Int("rows", len(released)),
			slog.Int64("first_row_id", released[0].ID), slog.String("reason", released[0].Err))
	}
}

// tableIsGone reports whether the subscriber's table no longer exists
// (outbox.Store.Gone), asked with a short timeout; false when that cannot
// be told.
func (s *Subscriber) tableIsGone() bool {
	ctx, cancel := context.WithTimeout(s.hardCtx, 5*time.Second)
	defer cancel()
	gone, _ := s.store.Gone(ctx)
	return gone
}

// completer is the service that writes settlements (settleLoop). It does
// not end with its context: Stop tells the loop to stop, and the loop
// returns once it has written every settlement queued before. Stop it
// after the last settlement was queued (after the drain); one queued after
// that is dropped (Subscriber.settle).
type completer struct {
	source.StartStop
	sub       *Subscriber
	closeOnce sync.Once
}

// Start runs the settle loop until Stop.
func (c *completer) Start(ctx context.Context) {
	c.StartLoop(ctx, func(context.Context) { c.sub.settleLoop() })
}

// Stop ends the settle loop and waits for the settlements queued to be
// written.
func (c *completer) Stop() {
	c.closeOnce.Do(func() { close(c.sub.settleStop) })
	c.StartStop.Stop()
}
