package mysqlbinlog

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// markChunk is the most rows one mark statement names.
const markChunk = 500

// markGiveUp bounds the retries of a mark at shutdown.
const markGiveUp = 5 * time.Second

// marker writes the jobs in order, each in one transaction, retrying one
// that fails (the database away) until it is written; at shutdown it
// gives up after markGiveUp: the rows after the stored position are read
// again by the next run.
func (s *Subscriber) marker(jobs <-chan markJob) {
	for job := range jobs {
		var since time.Time
		for attempt := 1; ; attempt++ {
			err := s.mark(job)
			if err == nil {
				break
			}
			if s.closingNow() {
				if since.IsZero() {
					since = time.Now()
				} else if time.Since(since) > markGiveUp {
					s.logger.Error("giving up on writing marks at shutdown; the rows after the stored position are published again by the next run", slog.Any("error", err))
					break
				}
			}
			wait := min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second)
			s.logger.Warn("cannot write marks; trying again", slog.Any("error", err), slog.Duration("wait", wait))
			time.Sleep(wait)
		}
	}
}

func (s *Subscriber) closingNow() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// mark writes one job: the marks of its rows, then its position.
func (s *Subscriber) mark(job markJob) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var done, failed []*entry
	for _, e := range job.rows {
		switch e.result {
		case acked:
			done = append(done, e)
		case setAside, dead:
			failed = append(failed, e)
		}
	}
	tx, err := s.db.SQL.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for i := 0; i < len(done); i += markChunk {
		if err := s.markDone(ctx, tx, done[i:min(i+markChunk, len(done))]); err != nil {
			return err
		}
	}
	for i := 0; i < len(failed); i += markChunk {
		if err := s.markFailed(ctx, tx, failed[i:min(i+markChunk, len(failed))]); err != nil {
			return err
		}
	}
	if job.pos != nil {
		if err := s.writePosition(ctx, tx, *job.pos); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if job.pos != nil {
		pos := *job.pos
		s.stored.Store(&pos)
	}
	deadLetters := 0
	for _, e := range failed {
		if e.result == dead {
			deadLetters++
			s.logger.Warn("row is a dead letter", slog.Int64("id", e.row.ID), slog.String("subject", e.row.Subject), slog.String("error", e.reason))
		}
	}
	s.Counters.Dead.Add(int64(deadLetters))
	s.Counters.Relayed.Add(int64(len(done)))
	for _, e := range done {
		if e.dup {
			s.Counters.Deduplicated.Add(1)
		}
	}
	if len(done) > 0 || len(failed) > 0 {
		s.progress.Store(time.Now().UnixNano())
	}
	return nil
}

func (s *Subscriber) markDone(ctx context.Context, tx *sql.Tx, rows []*entry) error {
	ids := make([]any, 0, len(rows))
	for _, e := range rows {
		ids = append(ids, e.row.ID)
	}
	keys := keyArms(rows)
	if s.cfg.DeleteOnRelay {
		_, err := tx.ExecContext(ctx, outbox.ExpandMySQL(s.q.DeleteDone, len(rows)), append(ids, keys...)...)
		return err
	}
	args := make([]any, 0, 7*len(rows))
	for _, e := range rows {
		var stream any
		if e.stream != "" {
			stream = e.stream
		}
		args = append(args, e.row.ID, stream)
	}
	for _, e := range rows {
		args = append(args, e.row.ID, int64(e.seq))
	}
	for _, e := range rows {
		args = append(args, e.row.ID, e.attempts)
	}
	args = append(append(args, ids...), keys...)
	if _, err := tx.ExecContext(ctx, outbox.ExpandMySQL(s.q.MarkDone, len(rows)), args...); err != nil {
		return fmt.Errorf("mark %d rows done: %w", len(rows), err)
	}
	return nil
}

func (s *Subscriber) markFailed(ctx context.Context, tx *sql.Tx, rows []*entry) error {
	args := make([]any, 0, 9*len(rows))
	for _, e := range rows {
		st := outbox.StatusFailed
		if e.result == dead {
			st = outbox.StatusPermanentFailed
		}
		args = append(args, e.row.ID, string(st))
	}
	for _, e := range rows {
		args = append(args, e.row.ID, outbox.SanitizeError(e.reason))
	}
	for _, e := range rows {
		args = append(args, e.row.ID, e.attempts)
	}
	for _, e := range rows {
		args = append(args, e.row.ID, e.backoff.Microseconds())
	}
	for _, e := range rows {
		args = append(args, e.row.ID)
	}
	args = append(args, keyArms(rows)...)
	if _, err := tx.ExecContext(ctx, outbox.ExpandMySQL(s.q.MarkFailed, len(rows)), args...); err != nil {
		return fmt.Errorf("mark %d rows failed: %w", len(rows), err)
	}
	return nil
}

// keyArms are the idempotency_key arms of a mark: each row is marked only
// while the row of its id has its key.
func keyArms(rows []*entry) []any {
	out := make([]any, 0, 2*len(rows))
	for _, e := range rows {
		out = append(out, e.row.ID, []byte(e.row.IdempotencyKey))
	}
	return out
}
