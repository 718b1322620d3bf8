package postgreswal

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// markBatchMax bounds the rows written by one statement.
const markBatchMax = 1000

// invisibleRetryMax is how long one batch retries the marks of rows whose
// transaction is not visible yet, before it queues them again behind the
// marks that came meanwhile.
const invisibleRetryMax = 2 * time.Second

type markKind int

const (
	markDone   markKind = iota // PubAck: done (or deleted)
	markDead                   // permanent_failed
	markFailed                 // a retryable failure, for status and retry to see; the row stays in the pipeline unless set aside
)

// markItem is one row's mark. Its fields are copied from the entry when
// the pipeline queues it, so the marker never reads an entry.
type markItem struct {
	e         *entry
	kind      markKind
	id        int64
	xid       uint32 // the row's inserting transaction; 0: known visible (swept)
	attempts  int
	stream    string
	seq       uint64
	duplicate bool
	reason    string
	backoff   time.Duration
	// first: the row's first publish (database clock), kept for a later
	// reconcile; zero when not known.
	first time.Time
	// aside: a failed mark of a row set aside, which leaves the window
	// once the mark is written (settled, as done and dead marks are).
	aside bool
}

// The marks of rows read from the log. Unlike the table source's, they
// are not fenced by a lease (these rows are never claimed): they change a
// row only while it is unsettled (pending, failed, or in_flight from a
// relay of source: table), so a done row, a deleted one or a dead letter
// stays as it is, and a mark written twice (after a restart) changes
// nothing. As the table source's marks do (see lease and fence in
// internal/outbox/queries/postgres/_fragments.sql; these use wal_lookup
// there), each reads its array
// element's row by primary key in a LATERAL subquery (alias l) and changes
// that row (alias o) only while its status is still the one l found. With
// the condition on o and the array joined to o directly, PostgreSQL read
// the whole table for a mark of 500 rows in tables of 200 to 10,000 rows
// (TestMarkPlansLookUpEachRowByPrimaryKey). A row whose status changed
// while the mark waited for it is left as it is: the visibility check
// finds it unsettled, and the mark is tried again; so is a mark of a row
// not yet visible (failed marks included: lost, the row would show
// neither its error nor its backoff to bridge status and to the stall
// watch of a standby).

// marker writes the marks the pipeline queues (marks), in batches, until
// the queue is closed and empty; each batch's done and dead rows, and the
// failed marks of rows set aside, go back to the pipeline (settled). Under
// load batches grow; when idle a mark is written at once. It reads no
// entry: a markItem carries what its statement needs.
type marker struct {
	db            *sql.DB
	q             outbox.WALStatements
	deleteOnRelay bool // relay.delete_on_relay: a done row is deleted
	logger        *slog.Logger
	counters      *Counters
	marks         *queue[markItem] // from the pipeline
	settled       *queue[*entry]   // back to the pipeline
	writes        dbRetry
	// marked receives the rows each write settled (Subscriber.Signals).
	marked *source.TestSignal[int]
	// gone reports whether the table no longer exists (outbox.Store.Gone;
	// false when that cannot be told): a missing-table error may be
	// another relation's. tableGone: a write found it gone (logged once).
	// Used by the mark loop only.
	gone      func(context.Context) bool
	tableGone bool
}

// marker returns the Subscriber's marker, between its queues.
func (s *Subscriber) marker() *marker {
	return &marker{
		db: s.db.SQL, q: s.q, deleteOnRelay: s.cfg.DeleteOnRelay, logger: s.logger, counters: &s.Counters,
		marks: s.marks, settled: s.settled, writes: s.dbRetry(&s.markWrites), marked: s.Signals.Marked,
		gone: func(ctx context.Context) bool { gone, _ := s.store.Gone(ctx); return gone },
	}
}

// writesWaitReady is how long a write of marks (or a check of rows'
// visibility) may wait for the database before readiness fails: it takes
// milliseconds; one held longer waits on a lock (a session holding rows of
// the table), a slow disk or a server that stopped answering, and the
// slot's confirmed position waits with it, holding WAL on the server.
const writesWaitReady = 5 * time.Second

// writesHealth is the readiness of the marker's writes and the checker's
// reads: an error when one has waited longer than writesWaitReady or
// FailingAfter in a row failed; nil otherwise.
func (s *Subscriber) writesHealth() error {
	err := errors.Join(s.markWrites.Check("marks", writesWaitReady), s.checkReads.Check("visibility checks", writesWaitReady))
	if err != nil {
		return fmt.Errorf("%w; the slot's confirmed position waits", err)
	}
	return nil
}

// dbRetry is the Subscriber's retry of writes (marks, checks), each
// loop's recorded in h.
func (s *Subscriber) dbRetry(h *source.LoopHealth) dbRetry {
	return dbRetry{ctx: s.hardCtx, logger: s.logger, health: h}
}

// run writes marks until the queue is closed and empty.
func (mk *marker) run() {
	for {
		items, ok := mk.marks.wait()
		if !ok {
			return
		}
		for len(items) > 0 {
			n := min(len(items), markBatchMax)
			mk.write(items[:n])
			items = items[n:]
		}
	}
}

// write writes one batch, retrying while the database is unreachable
// (the slot's position waits meanwhile), and hands the settled rows back.
//
// A row can arrive from the log before its transaction is visible to
// other sessions: the server decodes a commit once its record is flushed,
// and makes the transaction visible just after (after a synchronous
// standby confirmed it, with synchronous replication). A mark that finds
// such a row invisible is tried again until it is visible; a row that is
// gone for good (deleted: delete_on_relay before a restart, or by hand;
// its table dropped) or settled already (marked before a restart) counts
// as settled.
func (mk *marker) write(items []markItem) {
	start := time.Now()
	pending := items
	for wait := 2 * time.Millisecond; ; wait = min(wait*2, 200*time.Millisecond) {
		var invisible []markItem
		ok := mk.writes.retry(len(pending), func(ctx context.Context) error {
			var err error
			invisible, err = mk.try(ctx, pending)
			if outbox.IsMissingTable(err) && mk.gone != nil && mk.gone(ctx) {
				// The table is gone (dropped: a tenant let go), and its
				// rows with it: they count as settled, as deleted rows
				// do, rather than hold the slot's position or the drain.
				level := slog.LevelDebug
				if !mk.tableGone {
					mk.tableGone, level = true, slog.LevelWarn // once
				}
				mk.logger.Log(ctx, level, "marks not written: the outbox table no longer exists (dropped?), and its rows went with it", slog.Int("rows", len(pending)), slog.Any("error", err))
				invisible, err = nil, nil
			}
			return err
		})
		if !ok {
			return // not settled: the slot's position stays before these rows
		}
		var settled []*entry
		for _, m := range pending {
			if (m.kind != markFailed || m.aside) && !slices.ContainsFunc(invisible, func(i markItem) bool { return i.id == m.id }) {
				settled = append(settled, m.e)
			}
		}
		mk.settled.push(settled...)
		mk.marked.Signal(len(settled))
		if len(invisible) == 0 {
			mk.logger.Debug("marked", slog.Int("rows", len(items)), slog.Duration("took", time.Since(start)))
			return
		}
		if time.Since(start) > invisibleRetryMax {
			mk.logger.Warn("rows read from the log are still not visible; trying their marks again later",
				slog.Int("rows", len(invisible)), slog.Int64("first_row_id", invisible[0].id), slog.Duration("waited", time.Since(start).Round(time.Millisecond)))
			mk.marks.push(invisible...)
			return
		}
		pending = invisible
		select {
		case <-time.After(wait):
		case <-mk.writes.ctx.Done():
			return
		}
	}
}

// try runs the statements once and returns the marks (done, dead,
// failed) that found their row not yet visible.
func (mk *marker) try(ctx context.Context, items []markItem) ([]markItem, error) {
	var done, dead, failed []markItem
	for _, m := range items {
		switch m.kind {
		case markDone:
			done = append(done, m)
		case markDead:
			dead = append(dead, m)
		case markFailed:
			failed = append(failed, m)
		}
	}
	db := mk.db
	changed := map[int64]bool{}
	collect := func(query string, args ...any) error {
		rows, err := db.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			changed[id] = true
		}
		return rows.Err()
	}
	if len(failed) > 0 {
		ids, errs, attempts, delays, firsts := make([]int64, len(failed)), make([]string, len(failed)), make([]int32, len(failed)), make([]int64, len(failed)), make([]*time.Time, len(failed))
		for i, m := range failed {
			ids[i], errs[i], attempts[i], delays[i] = m.id, outbox.SanitizeError(m.reason), int32(m.attempts), m.backoff.Microseconds()
			if !m.first.IsZero() {
				firsts[i] = &m.first
			}
		}
		if err := collect(mk.q.MarkFailed, ids, errs, attempts, delays, firsts); err != nil {
			return nil, fmt.Errorf("mark %d outbox rows failed: %w", len(failed), err)
		}
	}
	if len(dead) > 0 {
		ids, errs, attempts := make([]int64, len(dead)), make([]string, len(dead)), make([]int32, len(dead))
		for i, m := range dead {
			ids[i], errs[i], attempts[i] = m.id, outbox.SanitizeError(m.reason), int32(m.attempts)
		}
		if err := collect(mk.q.MarkDead, ids, errs, attempts); err != nil {
			return nil, fmt.Errorf("mark %d outbox rows permanent_failed: %w", len(dead), err)
		}
	}
	if len(done) > 0 {
		ids := make([]int64, len(done))
		for i, m := range done {
			ids[i] = m.id
		}
		var err error
		if mk.deleteOnRelay {
			err = collect(mk.q.DeleteDone, ids)
		} else {
			streams, seqs, attempts := make([]string, len(done)), make([]int64, len(done)), make([]int32, len(done))
			for i, m := range done {
				streams[i], seqs[i], attempts[i] = m.stream, int64(m.seq), int32(m.attempts)
			}
			err = collect(mk.q.MarkDone, ids, streams, seqs, attempts)
		}
		if err != nil {
			return nil, fmt.Errorf("mark %d outbox rows done: %w", len(done), err)
		}
	}
	// A failed mark that found its row not yet visible is tried again
	// too: lost, the row would show neither its error nor its backoff.
	var missing []markItem
	for _, m := range slices.Concat(done, dead, failed) {
		if !changed[m.id] {
			missing = append(missing, m)
		}
	}
	invisible, err := mk.invisible(ctx, missing)
	if err != nil {
		return nil, err
	}
	for _, m := range append(done, dead...) {
		if changed[m.id] || !slices.ContainsFunc(invisible, func(i markItem) bool { return i.id == m.id }) {
			mk.count(m)
		}
	}
	return invisible, nil
}

// count adds a settled mark to the counters.
func (mk *marker) count(m markItem) {
	switch m.kind {
	case markDone:
		mk.counters.Relayed.Add(1)
		if m.duplicate {
			mk.counters.Deduplicated.Add(1)
		}
	case markDead:
		mk.counters.Dead.Add(1)
	}
}

// invisible returns the marks among missing (rows their statement did not
// change) to try again: rows unsettled after all (they became visible
// after the statement), and rows not there whose transaction the current
// snapshot does not see yet. Rows there and settled, and rows gone whose
// transaction is visible, are settled.
func (mk *marker) invisible(ctx context.Context, missing []markItem) ([]markItem, error) {
	if len(missing) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(missing))
	for i, m := range missing {
		ids[i] = m.id
	}
	var snapText, presentText, unsettledText string
	if err := mk.db.QueryRowContext(ctx, mk.q.MarkCheck, ids).Scan(&snapText, &presentText, &unsettledText); err != nil {
		return nil, fmt.Errorf("check unmarked outbox rows: %w", err)
	}
	snap, err := parseSnapshot(snapText)
	if err != nil {
		return nil, err
	}
	present, unsettled := strings.Split(presentText, ","), strings.Split(unsettledText, ",")
	var out []markItem
	for _, m := range missing {
		switch {
		case slices.Contains(unsettled, strconv.FormatInt(m.id, 10)):
			out = append(out, m)
		case slices.Contains(present, strconv.FormatInt(m.id, 10)):
		case m.xid != 0 && !snap.visible(m.xid):
			out = append(out, m)
		}
	}
	return out, nil
}

// snapshot is a PostgreSQL snapshot (pg_snapshot): transactions below
// xmin are finished, those from xmax on had not started, and xip lists
// those in progress in between.
type snapshot struct {
	xmin, xmax uint64
	xip        []uint64
}

// parseSnapshot reads pg_snapshot's text form "xmin:xmax:xip,xip,…".
func parseSnapshot(text string) (snapshot, error) {
	parts := strings.Split(text, ":")
	if len(parts) != 3 {
		return snapshot{}, fmt.Errorf("snapshot %q: not xmin:xmax:xip_list", text)
	}
	var snap snapshot
	var err error
	if snap.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: %w", text, err)
	}
	if snap.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: %w", text, err)
	}
	for x := range strings.SplitSeq(parts[2], ",") {
		if x == "" {
			continue
		}
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return snapshot{}, fmt.Errorf("snapshot %q: %w", text, err)
		}
		snap.xip = append(snap.xip, v)
	}
	return snap, nil
}

// visible reports whether the snapshot sees the committed transaction xid
// (32 bits, as the log names it). Its full id is the one nearest xmax:
// live transaction ids span less than 2^31 (PostgreSQL's wraparound
// protection). A transaction that committed but is not visible yet can be
// at or above xmax, which moves only when a transaction becomes visible.
func (snap snapshot) visible(xid uint32) bool {
	full := uint64(int64(snap.xmax) + int64(int32(xid-uint32(snap.xmax))))
	switch {
	case full < snap.xmin:
		return true
	case full >= snap.xmax:
		return false
	}
	return !slices.Contains(snap.xip, full)
}

// dbRetry runs the writes of the marker and the checker again while the
// database is unreachable.
type dbRetry struct {
	ctx    context.Context // the Subscriber's hardCtx: ends when a drain gives up
	logger *slog.Logger
	health *source.LoopHealth // readiness and the stall watch read it
	// timeout bounds one try; 0: writeTimeout.
	timeout time.Duration
}

// writeTimeout bounds one try of a write (or a check): one that waits
// longer (a lock held, a server that stopped answering on a session whose
// socket stays open) fails and is tried again, on a new session when the
// old one is broken, rather than wait for ever.
const writeTimeout = 30 * time.Second

// retry runs write until it succeeds, each try bounded by writeTimeout,
// waiting longer after each failure (100 ms doubling to 5 s), and reports
// whether it did. It gives up only when ctx ends (a drain that gave up):
// the rows are then not confirmed, and the next run publishes and marks
// them again.
func (r dbRetry) retry(rows int, write func(context.Context) error) bool {
	for wait := 100 * time.Millisecond; ; wait = min(wait*2, 5*time.Second) {
		r.health.Begin()
		timeout := cmp.Or(r.timeout, writeTimeout)
		ctx, cancel := context.WithTimeout(r.ctx, timeout)
		err := write(ctx)
		if err != nil && ctx.Err() != nil && r.ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s: %w", timeout, err)
		}
		cancel()
		r.health.End(err)
		if err == nil {
			return true
		}
		if r.ctx.Err() != nil {
			r.logger.Error("marks not written; the slot's position stays before these rows, which the next run publishes again",
				slog.Int("rows", rows), slog.Any("error", err))
			return false
		}
		r.logger.Error("write marks; the slot's position waits", slog.Int("rows", rows), slog.Any("error", err), slog.Duration("retry_in", wait))
		select {
		case <-time.After(wait):
		case <-r.ctx.Done():
		}
	}
}
