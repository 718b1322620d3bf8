package mysqlbinlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/telemetry"
)

// entry is one row read from the log or by the sweep, while the pipeline
// holds it.
type entry struct {
	row       outbox.Row
	status    string // the status the row image has (read from the log)
	attempts  int    // failed attempts so far (the attempts column)
	decodeErr error  // the row cannot be read: a dead letter
	skip      bool   // not publishable from the log (the sweep has it)
	at        time.Time
	// the outcome of the batch
	result  result
	reason  string
	backoff time.Duration
	stream  string
	seq     uint64
	dup     bool
	// unmarked: a constraint of the table refused the row's mark
	// (markEach); it keeps its status.
	unmarked bool
	// reread: the row's transaction was read in parts; its content is
	// taken from the table (pipeline.reread).
	reread bool
	// untried: read by the sweep, its last_error NULL; refused: its mark
	// was refused before (unmarkable).
	untried, refused bool
}

// result is what became of an entry in its batch.
type result int

const (
	unsettled result = iota
	acked            // PubAck: done (or deleted)
	setAside         // failed, due again after backoff
	dead             // permanent_failed
	skipped          // settled already, or not the pipeline's: no mark
)

// markJob is one transaction of the marker: the marks of a batch, then
// the position past it (none when the batch did not settle every row, or
// for the sweep's batches).
type markJob struct {
	rows   []*entry
	pos    *Position
	weight int64 // the rows it holds of the queue's room (markQueue.put)
	seq    int64 // its count among the jobs put (of the last, merged)
}

// session reads the log from the stored position (or, the first time,
// from the server's current position, with a sweep of the rows before
// it) while this relay holds the lock on conn, until closing or an error.
func (s *Subscriber) session(lock *sql.Conn, out chan<- *message.Message) error {
	ctx, cancel := context.WithCancel(s.hardCtx)
	defer cancel()
	start, written, found, err := s.storedPosition(ctx)
	if err != nil {
		return err
	}
	fresh := !found || s.state.Load().fault != ""
	if !found {
		if start, err = serverPosition(ctx, s.db.SQL, s.srv); err != nil {
			return err
		}
		if err := s.writePosition(ctx, s.db.SQL, start); err != nil {
			return err
		}
		s.logger.Info("no stored binary log position: reading from the server's current one; the sweep publishes the pending rows before it", slog.String("position", start.String()))
	}
	s.stored.Store(&start)
	jobs := newMarkQueue(s.cfg.MaxInFlight, &s.unmarked)
	markerDone := make(chan struct{})
	go func() {
		defer close(markerDone)
		s.marker(jobs)
	}()
	defer func() {
		jobs.close()
		<-markerDone
	}()

	p := &pipeline{s: s, out: out, asides: map[string]int64{}, told: map[string]time.Time{}, jobs: jobs, carry: make(chan txn, 1)}
	if found && s.cfg.Reconciler != nil {
		// The rows up to four batches past the stored position may have
		// been published by the run that stored it (three batches' rows
		// with the marker, queued or being written: markQueue; the batch
		// being published), at any time since a little before it was
		// stored.
		if now, err := dbNow(ctx, s.db.SQL); err == nil && !written.IsZero() {
			p.doubt = 4 * s.cfg.MaxInFlight
			p.doubtSince = written.Add(-time.Minute)
			// The first batch fills too: were it in doubt, a scan of a
			// few rows would be one more scan of everything the streams
			// stored since doubtSince.
			p.scanning = true
			p.dbStart, p.localStart = now, time.Now()
		}
	}
	if p.since, err = dbNow(ctx, s.db.SQL); err != nil {
		return err
	}
	p.clockOffset = p.since.Sub(time.Now())
	if err := p.loadAsides(ctx); err != nil {
		return err
	}
	s.state.Store(&readState{err: fmt.Errorf("starting to read at %s", start), fault: s.state.Load().fault})
	first := time.Duration(0)
	if fresh {
		// Every pending row committed before start is the sweep's: they go
		// first, in id order, before the log's rows after them.
		cutoff, err := dbNow(ctx, s.db.SQL)
		if err != nil {
			return err
		}
		if !p.sweep(cutoff) {
			return nil
		}
		first = s.cfg.SweepInterval
		if st := s.state.Load(); st.fault != "" {
			text := fmt.Sprintf("recovered at %s from a purged binary log position: the rows committed while it was lost were published by the sweep, in id order, not in commit order", time.Now().UTC().Format(time.RFC3339))
			s.logger.Warn(text)
			s.recovered.Store(&recovery{text: text, until: time.Now().Add(recoveredFor)})
			s.state.Store(&readState{err: fmt.Errorf("starting to read at %s", start)})
		}
	}
	txs := make(chan txn, 4)
	readErr := make(chan error, 1)
	go func() { readErr <- s.read(ctx, start, txs) }()
	s.logger.Info("reading the binary log", slog.String("from", start.String()), slog.Uint64("server_id", uint64(s.cfg.ServerID)))
	sweep := time.NewTimer(first)
	defer sweep.Stop()
	lockLost := s.keepLock(ctx, lock)
	var sweepAt *Position // the sweep waits until the marks reach this position
	var sweepCutoff time.Time
	// Then until the marker has written every batch handed to it by then
	// (sweepAfter, a markQueue sequence; -1: not yet known): the sweep reads
	// the ordering keys set aside from the table, where a row set aside in
	// a batch whose mark was still queued would not be, and the rows of its
	// key after it would be published before it. Meanwhile the batches go
	// on (the reader hands a position at least once a second while a sweep
	// waits: the loop looks again).
	sweepAfter := int64(-1)
	defer s.wantPosition.Store(false) // a session that ends leaves no sweep waiting
	for {
		if sweepAt != nil && sweepAfter < 0 && s.stored.Load().covers(*sweepAt, s.srv.Flavor) {
			sweepAfter = p.jobs.queued
		}
		if sweepAfter >= 0 && p.jobs.written.Load() >= sweepAfter {
			sweepAfter = -1
			if !p.sweep(sweepCutoff) {
				return nil
			}
			sweepAt = nil
			s.wantPosition.Store(false)
			sweep.Reset(s.cfg.SweepInterval)
		}
		// The transaction a batch carried over comes before the queue's,
		// and the session's other events are heard meanwhile (a backlog
		// carries one over batch after batch).
		next := txs
		if p.carried {
			next = p.carry
		}
		var t txn
		ok := false
		select {
		case <-s.closing:
			return nil
		case err := <-readErr:
			if err == nil {
				err = errors.New("the replication stream ended")
			}
			return s.readFailed(ctx, err)
		case t = <-next:
			ok, p.carried = true, false
		case <-sweep.C:
			cutoff, err := dbNow(ctx, s.db.SQL)
			// A pending row created just before the sweep may be a
			// transaction the log brings after the position read below: it
			// is left to the log.
			cutoff = cutoff.Add(-min(sweepGrace, s.cfg.SweepInterval))
			var at Position
			if err == nil {
				at, err = serverPosition(ctx, s.db.SQL, s.srv)
			}
			if err != nil {
				s.logger.Warn("sweep: cannot read the server's position; trying again at the next sweep", slog.Any("error", err))
				sweep.Reset(s.cfg.SweepInterval)
				continue
			}
			sweepAt, sweepCutoff = &at, cutoff
			s.wantPosition.Store(true)
		case err := <-lockLost:
			return err
		}
		if ok {
			if err := p.batch(p.gather(t, txs)); err != nil {
				if errors.Is(err, errClosing) {
					return nil
				}
				return err
			}
		}
	}
}

// gather returns the batch that begins with first: first and the
// transactions queued behind it, up to MaxInFlight rows and
// MaxInFlightBytes (first always fits; a transaction that would pass either
// bound is carried to begin the next batch). It waits for more, up to
// fillWait in all, in two cases:
//
//   - Rows in doubt are read (scanning): each batch is looked up in its
//     streams, a scan of what they stored since, so a backlog of small
//     transactions in batches of four or five was a scan each (~5 rows a
//     second). Not for every batch of the doubt zone: after a restart
//     within the duplicate window nothing is in doubt, and the rows
//     committed in the session's first seconds each waited 200 ms (p99
//     190 ms at 1,000 rows/s).
//   - The relay is behind: first was committed more than behindAge ago
//     (a backlog, after a restart or an outage). It takes the
//     transactions that come within behindGap of each other, so that a
//     backlog is published and marked in batches of up to MaxInFlight rows,
//     not of the four transactions the queue holds (6,000 one-row
//     transactions took 2.5–3.9 s instead of ~1). The reader hands over a
//     backlog's transactions as fast as it decodes them (tens of µs each).
//     Not by the queue being full: it fills while a batch is marked, and
//     every batch after it waited (at 1,000 rows a second, 100 ms at the
//     median with a 5 ms gap, p99 +2.5 ms with 1 ms).
func (p *pipeline) gather(first txn, txs <-chan txn) []txn {
	s := p.s
	batch := []txn{first}
	rows, size := len(first.rows), first.bytes
	var fill, idle <-chan time.Time
	var gap *time.Timer
	switch {
	case p.doubt > 0 && p.scanning:
		fill = time.After(fillWait)
	case time.Now().Add(p.clockOffset).Sub(first.at) > behindAge:
		fill = time.After(fillWait)
		gap = time.NewTimer(behindGap)
		defer gap.Stop()
		idle = gap.C
	}
	for rows < s.cfg.MaxInFlight && size < s.cfg.MaxInFlightBytes {
		var t txn
		if fill == nil {
			select {
			case t = <-txs:
			default:
				return batch
			}
		} else {
			select {
			case t = <-txs:
			case <-fill:
				return batch
			case <-idle:
				return batch
			case <-s.closing:
				return batch
			}
			if gap != nil {
				gap.Reset(behindGap)
			}
		}
		if rows+len(t.rows) > s.cfg.MaxInFlight || size+t.bytes > s.cfg.MaxInFlightBytes {
			p.carry <- t // empty: the batch began with what it held
			p.carried = true
			return batch
		}
		batch = append(batch, t)
		rows, size = rows+len(t.rows), size+t.bytes
	}
	return batch
}

// fillWait is the longest a batch waits to fill (see gather); behindAge,
// how old (commit time, whole seconds, against the database's clock) a
// transaction shows the relay behind; behindGap, how long a batch waits for
// the next transaction while the relay is behind.
const (
	fillWait  = 200 * time.Millisecond
	behindAge = 2 * time.Second
	behindGap = time.Millisecond
)

// keepLock checks every 2 s, on a goroutine of its own (the pipeline may
// wait long for NATS), that the lock's session still holds the lock; the
// checks are also what keeps that session from its wait_timeout (lockIdle,
// set when it was taken: a holder frozen or cut off loses the lock within
// it). The channel receives why the lock was lost, and the session's reads
// stop.
func (s *Subscriber) keepLock(ctx context.Context, lock *sql.Conn) <-chan error {
	lost := make(chan error, 1)
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var mine sql.NullInt64
			if err := lock.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", s.lockName).Scan(&mine); ctx.Err() == nil && (err != nil || mine.Int64 != 1) {
				lost <- fmt.Errorf("lost the binary log's lock %q (its session ended: %v); another relay may read the log now", s.lockName, err)
				return
			}
		}
	}()
	return lost
}

// readFailed names a session's end: a position purged from the server is
// recovered from (the position is moved to the server's current one and
// the sweep publishes what was committed in between).
func (s *Subscriber) readFailed(ctx context.Context, err error) error {
	if !purged(err) {
		return err
	}
	stored := s.stored.Load()
	now, perr := serverPosition(ctx, s.db.SQL, s.srv)
	if perr != nil {
		return errors.Join(err, perr)
	}
	fault := fmt.Sprintf("binary log position %s of %s was purged from the server (binlog_expire_logs_seconds / expire_logs_days, or PURGE BINARY LOGS, while the relay was down): reading from the server's current position %s; the rows committed in between are published by the sweep, not in commit order", stored, s.cfg.Table, now)
	s.logger.Error(fault)
	if werr := s.writePosition(ctx, s.db.SQL, now); werr != nil {
		return errors.Join(err, werr)
	}
	s.state.Store(&readState{err: err, fault: fault})
	return err
}

// purged reports the server's refusal of a position whose binary log is
// gone: ER_MASTER_FATAL_ERROR_READING_BINLOG (1236) with "Could not find
// GTID state requested by slave in any binlog files" (MariaDB), "Could not
// find first log file name in binary log index file" or "purged" (MySQL).
func purged(err error) bool {
	var me *gomysql.MyError
	if !errors.As(err, &me) || me.Code != gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
		return false
	}
	msg := strings.ToLower(me.Message)
	return strings.Contains(msg, "purged") || strings.Contains(msg, "could not find")
}

// writePosition stores pos on db (the pool, or the marks' transaction).
func (s *Subscriber) writePosition(ctx context.Context, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, pos Position) error {
	if _, err := db.ExecContext(ctx, s.q.PositionWrite, pos.GTID, pos.File, int64(pos.Pos)); err != nil {
		return fmt.Errorf("store the binary log position of %s: %w", s.cfg.Table, err)
	}
	return nil
}

// pipeline is one session's publishing side, run by the session's
// goroutine.
type pipeline struct {
	s      *Subscriber
	out    chan<- *message.Message
	jobs   *markQueue
	asides map[string]int64     // ordering key → the least id of its rows set aside
	told   map[string]time.Time // subject → when a row of it set aside was last logged
	// doubt is how many of the unsettled rows from the session's start
	// may have been published by the previous run (see Config.Reconciler), since
	// doubtSince (database clock); dbStart is the database clock at
	// localStart.
	doubt               int
	doubtSince, dbStart time.Time
	localStart          time.Time
	// scanning: the last batch held rows in doubt, looked up in their
	// streams (true at the start of a session with a doubt zone); the
	// next batches wait a moment to fill (gather).
	scanning bool
	// since is the database clock when the session began reading: a row
	// created after it comes from the log (missedByLog); clockOffset, the
	// database clock less the local one then.
	since       time.Time
	clockOffset time.Duration
	// carry holds, when carried, the transaction read that would have
	// passed the bounds of the batch before: the next batch begins with it.
	carry   chan txn
	carried bool
}

// loadAsides reads the ordering keys with failed rows.
func (p *pipeline) loadAsides(ctx context.Context) error {
	rows, err := p.s.db.SQL.QueryContext(ctx, p.s.q.Asides)
	if err != nil {
		return fmt.Errorf("read the rows set aside of %s: %w", p.s.cfg.Table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var key []byte
		var id int64
		if err := rows.Scan(&key, &id); err != nil {
			return err
		}
		p.asides[string(key)] = id
	}
	return rows.Err()
}

// sweepGrace is how old a pending row must be (or SweepInterval, if
// shorter) before the sweep takes it for one the log will not bring.
const sweepGrace = 30 * time.Second

// errClosing ends a session that closing cut short.
var errClosing = errors.New("closing")

// batch publishes the rows of txs that the table says are pending, in
// order, and hands their marks and the position past txs to the marker.
// Errors: errClosing when closing cut it short; the database's when the
// rows' status cannot be read (the next session reads them again).
func (p *pipeline) batch(txs []txn) error {
	s := p.s
	var rows []*entry
	for _, t := range txs {
		for _, e := range t.rows {
			e.at = t.at
			rows = append(rows, e)
		}
	}
	// The position past the batch's last commit: the rows of a
	// transaction whose end is still to come are marked, but the position
	// stays before it.
	var pos *Position
	for i := len(txs) - 1; i >= 0; i-- {
		if txs[i].commit {
			pos = &txs[i].pos
			break
		}
	}
	if len(rows) == 0 {
		if pos != nil {
			p.jobs.put(markJob{pos: pos})
		}
		return nil
	}
	s.oldest.Store(rows[0].at.UnixNano())
	defer s.oldest.Store(0)
	began := time.Now()
	if err := p.filter(rows); err != nil {
		// The rows' state is unknown: the session ends and the next reads
		// them again.
		return fmt.Errorf("read the status of the rows read from the binary log: %w", err)
	}
	if p.doubt > 0 {
		p.reconcile(rows)
	}
	filtered := time.Now()
	complete := p.publish(rows)
	if took := time.Since(began); took > 50*time.Millisecond {
		s.logger.Debug("slow batch", slog.Int("rows", len(rows)), slog.Duration("status_read", filtered.Sub(began)), slog.Duration("publish", time.Since(filtered)))
	}
	// The marker needs the rows' outcomes, not their contents: up to three
	// batches are with it (two queued, one being written), and their
	// payloads would be held meanwhile (a backlog of 32 KiB rows in full
	// batches: 4 × relay.max_in_flight_bytes).
	for _, e := range rows {
		e.row.Payload, e.row.Headers = nil, nil
	}
	job := markJob{rows: rows}
	if complete {
		job.pos = pos
	}
	p.jobs.put(job)
	if !complete {
		return errClosing
	}
	return nil
}

// filter marks skipped the rows the table does not hold as pending (done,
// dead letters, failed and the sweep's, in flight under a source: table
// relay, deleted), and the rows decoded badly for the sweep. A row of an
// ordering key with rows set aside is set aside behind them.
func (p *pipeline) filter(rows []*entry) error {
	s := p.s
	ctx, cancel := context.WithTimeout(s.hardCtx, 30*time.Second)
	defer cancel()
	type held struct{ status, key string }
	status := make(map[int64]held, len(rows))
	for i := 0; i < len(rows); i += 1000 {
		chunk := rows[i:min(i+1000, len(rows))]
		ids := make([]any, len(chunk))
		for j, e := range chunk {
			ids[j] = e.row.ID
		}
		res, err := s.db.SQL.QueryContext(ctx, outbox.ExpandMySQL(s.q.Statuses, len(ids)), ids...)
		if err != nil {
			return err
		}
		for res.Next() {
			var id int64
			var st string
			var key []byte
			if err := res.Scan(&id, &st, &key); err != nil {
				res.Close()
				return err
			}
			status[id] = held{st, string(key)}
		}
		if err := res.Close(); err != nil {
			return err
		}
	}
	if err := p.reread(ctx, rows, func(e *entry) bool {
		h, ok := status[e.row.ID]
		return ok && h.status == string(outbox.StatusPending) && h.key == e.row.IdempotencyKey
	}); err != nil {
		return err
	}
	for _, e := range rows {
		h, ok := status[e.row.ID]
		switch {
		case e.skip || !ok || h.status != string(outbox.StatusPending) || h.key != e.row.IdempotencyKey:
			// Settled, not the pipeline's, deleted, or another row under
			// the id (the table truncated since the log's insert).
			e.result = skipped
			s.Counters.Skipped.Add(1)
		case e.row.OrderingKey.Valid:
			if head, ok := p.asides[e.row.OrderingKey.String]; ok && head < e.row.ID {
				e.result, e.reason = setAside, fmt.Sprintf("waits for row %d of its ordering key, set aside", head)
				s.Counters.SetAside.Add(1)
			}
		}
	}
	return nil
}

// reread takes the content of the rows of transactions read in parts
// (entry.reread) that are pending from the table, which holds what their
// transactions committed: an UPDATE of a row by its own transaction comes
// in the log after its insert, and when the part with the insert was
// handed on already, the reader cannot apply it (before, such a row was
// published as inserted). The read follows the status read, which waited
// for the transactions' commit.
func (p *pipeline) reread(ctx context.Context, rows []*entry, pending func(*entry) bool) error {
	s := p.s
	var ids []any
	byID := map[int64]*entry{}
	for _, e := range rows {
		if e.reread && !e.skip && pending(e) {
			ids = append(ids, e.row.ID)
			byID[e.row.ID] = e
		}
	}
	limit := s.cfg.PayloadLimit()
	if limit == 0 {
		limit = 1 << 62
	}
	for i := 0; i < len(ids); i += 1000 {
		chunk := ids[i:min(i+1000, len(ids))]
		res, err := s.db.SQL.QueryContext(ctx, outbox.ExpandMySQL(s.q.Reread, len(chunk)), append([]any{limit}, chunk...)...)
		if err != nil {
			return err
		}
		table, err := scanEntries(res)
		if err != nil {
			return err
		}
		for _, t := range table {
			if e := byID[t.row.ID]; e != nil && t.row.IdempotencyKey == e.row.IdempotencyKey {
				e.row.Subject, e.row.Headers, e.row.OrderingKey = t.row.Subject, t.row.Headers, t.row.OrderingKey
				e.row.Payload, e.row.PayloadSize, e.row.PayloadLeftOut = t.row.Payload, t.row.PayloadSize, t.row.PayloadLeftOut
			}
		}
	}
	return nil
}

// reconcile looks up in their streams the rows of the doubt zone whose
// publish by the previous run may have left the duplicate window
// (dedup.Reconciler.InDoubt), and marks relayed, without a publish, those
// found.
//
// The zone counts the rows the table does not hold settled: the previous
// run marked in log order, so the rows it published unmarked are the first
// unsettled ones after the stored position, however many it marked past
// that position without storing it (the parts of a large transaction, or
// with relay.max_in_flight 1 each row, its position a job of its own).
// Counting every row, rows marked already used the zone up and the ones
// published unmarked after them were published again past the duplicate
// window (a saboteur: 8 rows twice).
func (p *pipeline) reconcile(rows []*entry) {
	s := p.s
	claimed := p.dbStart.Add(time.Since(p.localStart))
	var candidates []dedup.Candidate
	byID := map[int64]*entry{}
	for _, e := range rows {
		if p.doubt == 0 {
			break
		}
		if e.at.After(p.dbStart.Add(time.Second)) {
			// Committed after this session began (its event's time,
			// seconds): the run before could not have read it, nor any
			// row after it in the log.
			p.doubt = 0
			break
		}
		if e.result != unsettled {
			continue // settled: marked by the run before, or not the pipeline's
		}
		p.doubt--
		candidates = append(candidates, dedup.Candidate{ID: e.row.ID, IdempotencyKey: e.row.IdempotencyKey, Subject: e.row.Subject, FirstClaimedAt: p.doubtSince, ClaimedAt: claimed})
		byID[e.row.ID] = e
	}
	found, doubted := source.FindInDoubt(s.hardCtx, s.cfg.Reconciler, candidates, s.logger, "reconcile")
	p.scanning = doubted > 0
	for id, stored := range found {
		e := byID[id]
		e.result, e.stream, e.seq, e.dup = acked, stored.Stream, stored.Seq, true
		e.attempts++
	}
}

// watched is an emitted message awaiting its outcome.
type watched struct {
	e    *entry
	msg  *message.Message
	turn *sink.Turn
	at   time.Time
}

// publish publishes the unsettled rows, in order, until each has a
// result: acked, set aside, or dead. A failure of the destination holds
// the rows: they are published again, in order, after a backoff. False
// when closing cut it short (the rows without a result are left to the
// next run).
func (p *pipeline) publish(rows []*entry) bool {
	s := p.s
	held := 0
	for {
		var todo []*entry
		for _, e := range rows {
			if e.result == unsettled {
				todo = append(todo, e)
			}
		}
		if len(todo) == 0 {
			return true
		}
		if source.Closed(s.closing) {
			return false
		}
		for _, e := range todo {
			if key := e.row.OrderingKey; key.Valid {
				if head, ok := p.asides[key.String]; ok && head < e.row.ID {
					e.result, e.reason = setAside, fmt.Sprintf("waits for row %d of its ordering key, set aside", head)
					s.Counters.SetAside.Add(1)
				}
			}
		}
		var batch []watched
		var prev *sink.Turn
		closing := false
		// One row per ordering key a round: a row of a key waits for the
		// outcome of the row of its key before it, so that a row set aside
		// holds the later rows of its key (the next round sets them aside
		// behind it) rather than letting them pass it.
		keys := map[string]bool{}
		for _, e := range todo {
			if e.result != unsettled {
				continue
			}
			if key := e.row.OrderingKey; key.Valid {
				if keys[key.String] {
					continue
				}
				keys[key.String] = true
			}
			msg, turn, ok := p.message(e, prev)
			if !ok {
				continue // a dead letter
			}
			select {
			case p.out <- msg:
				prev = turn
				batch = append(batch, watched{e: e, msg: msg, turn: turn, at: time.Now()})
			case <-s.closing:
				turn.Pass(false)
				closing = true
			}
			if closing {
				break
			}
		}
		retry, wait := p.await(batch)
		if closing || source.Closed(s.closing) && retry {
			return false
		}
		if !retry {
			continue
		}
		held++
		if !s.cfg.Connected() {
			for !s.cfg.Connected() {
				if !s.sleep(100 * time.Millisecond) {
					return false
				}
			}
		} else if !s.sleep(max(wait, s.backoff(held))) {
			return false
		}
	}
}

// message builds e's next message, chained after prev, or makes e a dead
// letter (false) when it can never be published.
func (p *pipeline) message(e *entry, prev *sink.Turn) (*message.Message, *sink.Turn, bool) {
	s := p.s
	err := e.decodeErr
	var headers map[string][]string
	if err == nil {
		headers, err = outbox.ParseHeaders(e.row.Headers)
	}
	if err == nil {
		err = outbox.CheckSubject(e.row.Subject)
	}
	if err == nil && e.row.PayloadLeftOut {
		err = outbox.OverMaxPayload(e.row.PayloadSize, s.cfg.MaxPayload())
	}
	if err != nil {
		e.result, e.reason = dead, err.Error()
		return nil, nil, false
	}
	row := e.row
	row.Attempt = e.attempts + 1
	d := source.NewDelivery(row, headers, s.cfg.Namespace)
	turn := sink.NewTurn(prev)
	d.Deadline = time.Now().Add(s.cfg.AckDeadline)
	ctx := sink.WithTurn(telemetry.Parent(s.hardCtx, headers), turn)
	return source.NewMessage(ctx, d), turn, true
}

// await waits for the outcomes of batch, in order, and records them;
// retry reports rows held by a failure of the destination (published
// again after wait, at least), false when every row has a result.
func (p *pipeline) await(batch []watched) (retry bool, wait time.Duration) {
	s := p.s
	drain := time.NewTimer(s.cfg.DrainTimeout)
	defer drain.Stop()
	closing := s.closing
	for i := range batch {
		w := &batch[i]
		deadline := time.NewTimer(time.Until(w.at.Add(s.cfg.AckDeadline)))
		var o source.Outcome
		var got bool
		for !got {
			select {
			case <-w.msg.Acked():
				w.turn.Pass(true)
				o, got = source.OutcomeOf(w.msg), true
			case <-w.msg.Nacked():
				w.turn.Pass(false)
				o, got = source.OutcomeOf(w.msg), true
			case <-deadline.C:
				if source.Of(w.msg).TakeUnsent() {
					w.turn.Pass(false)
					o = source.Failed(fmt.Errorf("%w: still waiting its hand-over to NATS at ack deadline %s; not sent", source.ErrPublishDeadline, s.cfg.AckDeadline), source.Unavailable)
				} else {
					go passWhenSettled(w.msg, w.turn)
					o = source.Failed(fmt.Errorf("no ack or nack within ack deadline %s; publish outcome unknown", s.cfg.AckDeadline), source.Retryable)
				}
				got = true
			case <-closing:
				closing = nil // from now on the drain's timer bounds the wait
			case <-drain.C:
				if closing == nil {
					// Given up at shutdown: the rest are left to the next run.
					for j := i; j < len(batch); j++ {
						go passWhenSettled(batch[j].msg, batch[j].turn)
					}
					deadline.Stop()
					return true, 0
				}
				drain.Reset(s.cfg.DrainTimeout)
			}
		}
		deadline.Stop()
		if r, w := p.record(w.e, o); r {
			retry, wait = true, max(wait, w)
		}
	}
	return retry, wait
}

// record sets e's result from its outcome; true (and the least wait) when
// the failure holds it for another try.
func (p *pipeline) record(e *entry, o source.Outcome) (bool, time.Duration) {
	s := p.s
	if o.Published {
		e.result, e.stream, e.seq, e.dup = acked, o.Stream, o.Seq, o.Duplicate
		e.attempts++
		return false, 0
	}
	s.Counters.Failed.Add(1)
	reason := o.Reason()
	switch o.Class {
	case source.Permanent:
		e.attempts++
		e.result, e.reason = dead, reason
		return false, 0
	case source.Unavailable:
		return true, 0 // not the row's: the attempt does not count
	case source.Held:
		wait := o.HoldFor
		if wait == 0 {
			wait = s.cfg.HoldBack
		}
		if o.Own {
			p.setAside(e, reason, wait)
			return false, 0
		}
		return true, wait
	}
	e.attempts++
	if e.attempts >= s.cfg.MaxAttempts {
		e.result, e.reason = dead, fmt.Sprintf("%s (attempt %d of %d)", reason, e.attempts, s.cfg.MaxAttempts)
		return false, 0
	}
	if o.Own {
		p.setAside(e, reason, s.backoff(e.attempts))
		return false, 0
	}
	return true, 0
}

// setAside marks e failed, due after wait; the later rows of its ordering
// key wait behind it.
func (p *pipeline) setAside(e *entry, reason string, wait time.Duration) {
	e.result, e.reason, e.backoff = setAside, reason, wait
	p.s.Counters.SetAside.Add(1)
	// Said once a minute per subject: a stream missing for a busy subject
	// sets every row of it aside.
	if last, ok := p.told[e.row.Subject]; !ok || time.Since(last) > time.Minute {
		if len(p.told) > 1000 {
			clear(p.told)
		}
		p.told[e.row.Subject] = time.Now()
		p.s.logger.Warn("row set aside: failed for a reason of its own; the later rows of its ordering key wait behind it, the others go on, and the sweep tries it again after its backoff",
			slog.Int64("id", e.row.ID), slog.String("subject", e.row.Subject), slog.Duration("backoff", wait), slog.String("error", reason))
	}
	if e.row.OrderingKey.Valid {
		key := e.row.OrderingKey.String
		if head, ok := p.asides[key]; !ok || e.row.ID < head {
			p.asides[key] = e.row.ID
		}
	}
}

// passWhenSettled passes turn once msg is acked or nacked.
func passWhenSettled(msg *message.Message, turn *sink.Turn) {
	select {
	case <-msg.Acked():
		turn.Pass(true)
	case <-msg.Nacked():
		turn.Pass(false)
	}
}
