package mysqlbinlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"golang.org/x/sync/semaphore"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// markChunk is the most rows one mark statement names.
const markChunk = 500

// markGiveUp bounds the retries of a mark at shutdown.
const markGiveUp = 5 * time.Second

// markQueue hands the pipeline's batches to the marker: up to room rows
// not yet written (relay.max_in_flight × markRoomBatches), in jobs of any
// number, so that publishing goes on while a mark transaction waits on the
// database, and the marker writes every job queued meanwhile in one
// transaction. With a queue of two jobs, a commit of the marks held up
// 20–30 ms by the database held every batch behind it: at 1,000 rows/s in
// one-row transactions, a batch a millisecond, the pipeline waited on the
// marker (bridge-bench's latency phase, 2026-12-07).
type markQueue struct {
	jobs chan markJob
	room *semaphore.Weighted
	size int64
	// queued counts the jobs put (the pipeline's goroutine alone);
	// written is the count of the last job the marker wrote (or gave up
	// on at shutdown).
	queued  int64
	written atomic.Int64
	// unwritten counts the rows put and not written yet (the
	// Subscriber's, for its probes).
	unwritten *atomic.Int64
}

// markRoomBatches is how many full batches the marker may hold unwritten:
// as many as the queue of two jobs and the one being written held before
// the queue counted rows, so that the rows a run may have published past
// its stored position stay four batches (pipeline.doubt).
const markRoomBatches = 3

// markJobsQueued bounds the jobs queued, whatever their rows: a job of a
// position alone holds none.
const markJobsQueued = 1024

// markRoom is how many rows the marker may hold unwritten.
func markRoom(maxInFlight int) int64 { return int64(markRoomBatches * max(maxInFlight, 1)) }

func newMarkQueue(maxInFlight int, unwritten *atomic.Int64) *markQueue {
	size := markRoom(maxInFlight)
	return &markQueue{jobs: make(chan markJob, markJobsQueued), room: semaphore.NewWeighted(size), size: size, unwritten: unwritten}
}

// put queues job, after waiting for room for its rows while the marker is
// behind (the database slow or away).
func (q *markQueue) put(job markJob) {
	job.weight = min(int64(len(job.rows)), q.size)
	_ = q.room.Acquire(context.Background(), job.weight) // cannot fail: no deadline
	q.unwritten.Add(int64(len(job.rows)))
	q.queued++
	job.seq = q.queued
	q.jobs <- job
}

// marksWaitReady is how long a write of marks may wait for the database
// before readiness fails: a commit of marks takes milliseconds; one held
// longer waits on a lock (a session holding rows of the table, or the
// position row `<table>_binlog`), a slow disk or a server that stopped
// answering, and publishing stops once the marker's room is full.
const marksWaitReady = 5 * time.Second

// marksHealth is the readiness of the marks: an error when a write has
// waited longer than marksWaitReady or FailingAfter writes in a row failed,
// with how many rows wait to be marked; nil otherwise.
func (s *Subscriber) marksHealth() error {
	err := s.marks.Check("marks", marksWaitReady)
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w (%s published and not marked; publishing waits once %d are, and the stored binary log position with them)", err, outbox.Count(int(s.unmarked.Load()), "row"), markRoom(s.cfg.MaxInFlight))
}

// close ends the marker once it has written every job queued.
func (q *markQueue) close() { close(q.jobs) }

// next returns the first job queued and every one queued behind it, as one:
// their rows in order, and the last position among them (each job's
// position covers every row before it). False once closed and drained.
func (q *markQueue) next() (markJob, bool) {
	job, ok := <-q.jobs
	if !ok {
		return job, false
	}
	for {
		select {
		case more, ok := <-q.jobs:
			if !ok {
				return job, true
			}
			job.rows = append(job.rows, more.rows...)
			job.weight += more.weight
			job.seq = more.seq
			if more.pos != nil {
				job.pos = more.pos
			}
		default:
			return job, true
		}
	}
}

// marker writes the jobs in order, those queued together in one
// transaction, retrying one that fails (the database away) until it is
// written; at shutdown it gives up after markGiveUp: the rows after the
// stored position are read again by the next run.
func (s *Subscriber) marker(q *markQueue) {
	for {
		job, ok := q.next()
		if !ok {
			return
		}
		s.writeMarks(job)
		q.written.Store(job.seq)
		q.unwritten.Add(-int64(len(job.rows)))
		q.room.Release(job.weight)
	}
}

// writeMarks writes job, retrying as marker says.
func (s *Subscriber) writeMarks(job markJob) {
	var since time.Time
	for attempt := 1; ; attempt++ {
		s.marks.Begin()
		err := s.mark(job)
		s.marks.End(err)
		if err == nil {
			return
		}
		if s.closingNow() {
			if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) > markGiveUp {
				s.logger.Error("giving up on writing marks at shutdown; the rows after the stored position are published again by the next run", slog.Any("error", err))
				return
			}
		}
		wait := min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second)
		s.logger.Warn("cannot write marks; trying again", slog.Any("error", err), slog.Duration("wait", wait))
		time.Sleep(wait)
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
		if err := s.markEach(ctx, tx, done[i:min(i+markChunk, len(done))], s.markDone); err != nil {
			return err
		}
	}
	for i := 0; i < len(failed); i += markChunk {
		if err := s.markEach(ctx, tx, failed[i:min(i+markChunk, len(failed))], s.markFailed); err != nil {
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
	done = slices.DeleteFunc(done, func(e *entry) bool { return e.unmarked })
	failed = slices.DeleteFunc(failed, func(e *entry) bool { return e.unmarked })
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

// markEach marks rows with mark in one statement; when a constraint of the
// table refuses it (a row inserted with check_constraint_checks = 0 whose
// headers are not JSON: any update of the row is checked), one statement
// per row, in the same transaction (a statement that fails is rolled back
// alone), and the rows refused are left pending, named on readiness
// (Subscriber.unmarkable), so that the others' marks and the position are
// written: before, the marker retried the batch for ever, and everything
// after it waited, every probe green.
func (s *Subscriber) markEach(ctx context.Context, tx *sql.Tx, rows []*entry, mark func(context.Context, *sql.Tx, []*entry) error) error {
	err := mark(ctx, tx, rows)
	if err == nil {
		s.unmarkable.forget(rows...)
	}
	if err == nil || !constraintRefused(err) {
		return err
	}
	for _, e := range rows {
		err := mark(ctx, tx, []*entry{e})
		switch {
		case err == nil:
			s.unmarkable.forget(e)
		case constraintRefused(err):
			e.unmarked = true
			if s.unmarkable.add(e.row.ID, err, e.result == acked) {
				s.logger.Error("a constraint of the table refuses the row's mark: it keeps its status, and each sweep tries it again; mend or delete the row",
					slog.Int64("id", e.row.ID), slog.Any("error", err))
			}
		default:
			return err
		}
	}
	return nil
}

// constraintRefused reports a CHECK constraint's refusal of an update:
// MariaDB's ER_CONSTRAINT_FAILED (4025), MySQL's
// ER_CHECK_CONSTRAINT_VIOLATED (3819).
func constraintRefused(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 4025 || me.Number == 3819)
}

// unmarkable are the rows whose marks a constraint of the table refused,
// for readiness and the sweep: a row is forgotten once marked, or (a row
// not published) once a while has passed without another refusal (each
// sweep tries it again: a row deleted is not refused again).
type unmarkable struct {
	mu   sync.Mutex
	rows map[int64]refusal
}

type refusal struct {
	err error
	at  time.Time
	// published: the row is in its stream (its done mark was refused); the
	// sweep leaves it (it would publish it again), and it is named until
	// the relay stops. After a restart the sweep publishes it again, once:
	// nothing outside the table records it.
	published bool
}

// add records a refusal; true the first time for the row.
func (u *unmarkable) add(id int64, err error, published bool) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.rows == nil {
		u.rows = map[int64]refusal{}
	}
	_, known := u.rows[id]
	u.rows[id] = refusal{err: err, at: time.Now(), published: published}
	return !known
}

// refused reports a row whose mark was refused, and whether it is in its
// stream (its done mark refused).
func (u *unmarkable) refused(id int64) (known, published bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	r, known := u.rows[id]
	return known, r.published
}

// forget drops the refusals of rows now marked.
func (u *unmarkable) forget(rows ...*entry) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.rows) == 0 {
		return
	}
	for _, e := range rows {
		delete(u.rows, e.row.ID)
	}
}

// err is the readiness of the rows refused within the last within: nil
// when none.
func (u *unmarkable) err(within time.Duration) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	var ids []int64
	for id, r := range u.rows {
		if !r.published && time.Since(r.at) > within {
			delete(u.rows, id)
			continue
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	return fmt.Errorf("%d rows cannot be marked (row %d: %v): they keep their status, and each sweep tries them again; mend or delete them", len(ids), ids[0], u.rows[ids[0]].err)
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
