package postgreswal

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pglogrepl"

	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/telemetry"
)

// eventKind is what the reader saw on the replication stream.
type eventKind int

const (
	evBegin     eventKind = iota // a transaction starts: lsn = its commit LSN, at = its commit time, xid
	evRow                        // an inserted outbox row
	evCommit                     // the transaction ends: lsn = the end of its commit record
	evPosition                   // a keepalive between transactions: everything before lsn was sent
	evWatermark                  // a logical decoding message of the sweep: token
	evRestart                    // a new stream session starts after an interruption
)

// event is one thing read from the slot, in stream order.
type event struct {
	kind  eventKind
	lsn   pglogrepl.LSN
	at    time.Time
	xid   uint32
	row   decoded
	token string
}

// entryState is where a row stands.
type entryState int

const (
	queued   entryState = iota // to emit (first time, or again after a failure)
	emitted                    // handed to the router, outcome awaited
	acked                      // PubAck in, mark not yet written
	dead                       // a dead letter, mark not yet written
	settled                    // marked: done, deleted or permanent_failed
	checking                   // read again by a new session: checked against the table first (check.go)
	aside                      // set aside (aside.go): its failed mark is being written; then settled, out of the window
)

// entry is a row or a position in the window, in stream order.
type entry struct {
	marker bool // a position (commit or keepalive), not a row
	// holdFor is how long the failure being handled asks a Held row to
	// wait (source.Outcome.HoldFor); 0: the guard's HoldBack.
	holdFor time.Duration
	lsn     pglogrepl.LSN // marker: confirmed once everything before it is settled
	txTime  time.Time     // commit time of the row's transaction; a swept row: its created_at
	xid     uint32        // the row's transaction; 0 for a swept row
	txLSN   pglogrepl.LSN // the commit LSN of the row's transaction (0 for a swept row)

	row       outbox.Row
	decodeErr error
	swept     bool // found by the sweep, not read from the slot
	state     entryState
	// charged: the entry holds one row of the budget, from its read until
	// it leaves the window; size: the bytes of the budget it holds, until
	// its payload is no longer needed (PubAck, dead letter).
	charged   bool
	size      int64
	attempts  int       // publish attempts so far, the row's attempts column included
	lastErr   string    // why the last attempt failed
	firstEmit time.Time // when the row was first handed to the publisher; zero before
	// probe: the row came back from being set aside (aside.go): handed
	// over alone among the rows of its ordering key. back: it is among
	// the rows set aside until it is handed over or settled.
	probe, back bool
	// lost: the row waits in adopt, and a watermark showed that the
	// stream will not deliver it again (the slot was dropped and created
	// again): the sweep publishes it, or its mark settles it.
	lost bool

	msg  *message.Message // the emission whose outcome is awaited
	turn *sink.Turn
}

// outcome is what became of one emitted message.
type outcome struct {
	e        *entry
	msg      *message.Message
	acked    bool
	expired  bool // neither acked nor nacked within AckDeadline
	unsent   bool // not handed to the NATS client within AckDeadline (source.Delivery.TakeUnsent)
	released bool // given up by a drain that timed out
}

// pipeline owns the window: the rows read from the slot (and found by the
// sweep) that are not settled yet, in stream order, with the positions
// between them. It runs in one goroutine; every other goroutine talks to it
// through channels and queues.
type pipeline struct {
	s   *Subscriber
	win window

	halted        bool      // a failure of the destination (NATS, the stream's outage) holds the queue
	retryAt       time.Time // when a halted queue may go on
	waitConnected bool      // … and only once NATS is connected
	restarting    bool      // the stream restarts: reset once the outcomes are in
	closing       bool

	inTx, skipTx bool
	txTime       time.Time
	txXid        uint32
	txLSN        pglogrepl.LSN
	lastTurn     *sink.Turn
	// adopt holds, across a stream restart, the unsettled rows of the old
	// window by id, without their payloads: a row read again takes its
	// entry back with its state, so a row already published is not
	// published again.
	adopt map[int64]*entry
	// popped are the ids of the settled rows that left the window after
	// the last confirmed position: the rows of a transaction whose commit
	// has not arrived yet. A restart sends them again with their
	// transaction; they then go to resent, whose rows are skipped when
	// they are read again.
	popped, resent idRuns

	aside *asides // the rows set aside (aside.go)

	watermark *sweepRequest // a sweep waiting for its watermark
	appending *sweepRequest // swept rows waiting for room in the window
	// backlog is the rest of a batch of events whose handling a restart
	// interrupted: handled once the restart is complete.
	backlog []event
}

// run handles events, outcomes, marks and sweeps until the subscriber
// closes and every emitted message has its outcome.
func (p *pipeline) run(out chan<- *message.Message) {
	s := p.s
	drain := (<-chan time.Time)(nil)
	var retry, dueTimer *time.Timer
	// sweepAsked: when a sweep was last asked for the rows set aside
	// whose backoff ended.
	var sweepAsked time.Time
	for {
		p.settle()
		p.applyChecks()
		p.popSettled()
		if p.restarting && s.emitted.Load() == 0 {
			p.reset()
		}
		if !p.restarting && len(p.backlog) > 0 {
			p.handleAll(p.backlog)
		}
		p.resume()
		if p.appending != nil {
			p.appendSwept()
		}
		p.emit(out)
		if p.closing && s.emitted.Load() == 0 {
			return
		}

		// The reader takes each row's share of the budget before it hands
		// the row over: what waits here is within the bound.
		var events <-chan []event
		if !p.closing && !p.restarting && len(p.backlog) == 0 {
			events = s.events
		}
		var sweeps <-chan sweepRequest
		if !p.closing && p.appending == nil {
			sweeps = s.sweeps
		}
		var due <-chan time.Time
		if d := p.aside.nextSweep(sweepAsked); !d.IsZero() {
			if dueTimer == nil {
				dueTimer = time.NewTimer(max(time.Until(d), 0))
			} else {
				dueTimer.Reset(max(time.Until(d), 0))
			}
			due = dueTimer.C
		}
		var wake <-chan time.Time
		if p.halted && s.emitted.Load() == 0 {
			d := time.Until(p.retryAt)
			if p.waitConnected {
				d = max(d, 100*time.Millisecond)
			}
			if retry == nil {
				retry = time.NewTimer(max(d, 0))
			} else {
				retry.Reset(max(d, 0))
			}
			wake = retry.C
		}
		closing := s.closing
		if p.closing {
			closing = nil
		}
		select {
		case evs := <-events:
			p.handleAll(evs)
		case o := <-s.outcomes:
			p.outcome(o)
		case <-s.settled.ready:
		case <-s.checked.ready:
		case r := <-sweeps:
			p.sweep(r)
		case <-wake:
		case <-due:
			sweepAsked = time.Now()
			select {
			case s.sweepNow <- struct{}{}:
			default: // a sweep is asked for already
			}
		case <-closing:
			p.closing = true
			drain = time.After(s.cfg.DrainTimeout)
		case <-drain:
			drain = nil
			s.logger.Warn("drain timeout: giving up on the outcome of messages in flight; they are published again after a restart",
				slog.Int64("messages", s.emitted.Load()), slog.Duration("drain_timeout", s.cfg.DrainTimeout))
			close(s.drainExpired)
		}
	}
}

// handleAll takes a batch of events from the reader, in order, until a
// restart begins: the rest waits in backlog.
func (p *pipeline) handleAll(evs []event) {
	for i, ev := range evs {
		p.handle(ev)
		if p.restarting {
			p.backlog = evs[i+1:]
			return
		}
	}
	p.backlog = nil
}

// handle takes one event from the reader.
func (p *pipeline) handle(ev event) {
	s := p.s
	switch ev.kind {
	case evBegin:
		p.inTx, p.txTime, p.txXid, p.txLSN = true, ev.at, ev.xid, ev.lsn
		// A transaction whose commit precedes the confirmed position was
		// settled before an interruption: the server sends it again when
		// it did not get the last status update.
		p.skipTx = uint64(ev.lsn) < s.confirmed.Load()
	case evRow:
		size := rowSize(&ev.row.row)
		if p.skipTx {
			s.budget.give(1, size)
			return
		}
		s.Counters.Read.Add(1)
		id := ev.row.row.ID
		if p.resent.contains(id) { // settled before the stream restarted
			s.budget.give(1, size)
			return
		}
		e, ok := p.adopt[id]
		if ok {
			delete(p.adopt, id)
			e.lost = false
			e.row, e.decodeErr = ev.row.row, ev.row.err
			e.txTime, e.xid, e.txLSN = p.txTime, p.txXid, p.txLSN
		} else {
			e = &entry{row: ev.row.row, decodeErr: ev.row.err, txTime: p.txTime, xid: p.txXid, txLSN: p.txLSN, attempts: ev.row.row.Attempt}
		}
		e.charged, e.size = true, size
		if e.state != queued {
			p.drop(e) // published, dead or set aside before the restart
		} else if p.comesBack(e); uint64(p.txLSN) < s.stream.checkBelow.Load() { // back from being set aside, when it was
			// Committed before the session began: another run may have
			// relayed it (check.go).
			e.state = checking
			s.checks.push(checkItem{e: e, id: id, xid: e.xid, txTime: e.txTime, subject: e.row.Subject, idKey: e.row.IdempotencyKey})
		}
		p.push(e)
	case evCommit:
		p.inTx = false
		if p.skipTx {
			p.skipTx = false
			return
		}
		p.mark(ev.lsn, p.txTime)
	case evPosition:
		if !p.inTx {
			p.mark(ev.lsn, time.Time{})
		}
	case evWatermark:
		if p.watermark != nil && p.watermark.token == ev.token {
			p.notComing()
			p.watermark.ids <- held{ids: p.ids(), aside: p.aside.marked()}
			p.watermark = nil
		}
	case evRestart:
		s.Counters.Restarts.Add(1)
		p.restarting = true
		p.restart()
	}
}

// push appends a row entry to the window.
func (p *pipeline) push(e *entry) { p.win.push(e) }

// drop gives back the bytes e holds, and its payload: once it is published
// or dead, only its id and outcome matter.
func (p *pipeline) drop(e *entry) {
	p.s.budget.give(0, e.size)
	e.size = 0
	e.row.Payload, e.row.Headers = nil, nil
}

// release gives back all e holds of the budget, as it leaves the window.
func (p *pipeline) release(e *entry) {
	p.drop(e)
	if e.charged {
		p.s.budget.give(1, 0)
		e.charged = false
	}
}

// mark appends a position: confirmed once every row before it is settled.
// Consecutive positions collapse into the last.
func (p *pipeline) mark(lsn pglogrepl.LSN, at time.Time) {
	p.win.mark(lsn, at)
	p.confirm()
}

// confirm hands the window's confirmed position to the reader, which
// sends it to the server.
func (p *pipeline) confirm() {
	if lsn := uint64(p.win.confirmed); lsn > p.s.confirmed.Load() {
		p.s.confirmed.Store(lsn)
	}
}

// popSettled drops the settled entries at the head of the window and
// confirms the positions among them.
func (p *pipeline) popSettled() {
	p.win.pop(func(e *entry) {
		p.release(e)
		if !e.swept {
			p.popped.add(e.row.ID, e.txLSN)
		}
	}, func(pglogrepl.LSN) { p.popped = p.popped[:0] })
	p.confirm()
	if at, ok := p.win.oldest(); ok {
		p.s.oldestTx.Store(at.UnixNano())
	} else {
		p.s.oldestTx.Store(0)
	}
}

// settle takes the marks the marker wrote.
func (p *pipeline) settle() {
	taken := p.s.settled.take()
	if len(taken) > 0 {
		p.s.progress.Store(time.Now().UnixNano())
	}
	for _, e := range taken {
		if e.state == settled {
			continue
		}
		if e.state == aside {
			p.aside.markedNow(e.row.ID) // its failed mark is written
		}
		e.state = settled
		p.drop(e)
		if e.lost && p.adopt[e.row.ID] == e {
			delete(p.adopt, e.row.ID) // not coming again (notComing)
		}
	}
}

// applyChecks takes the verdicts of the check (check.go) on rows read
// again; a verdict on a row no longer checking (a restart came between)
// is dropped: the row is checked again when it is read again.
func (p *pipeline) applyChecks() {
	s := p.s
	for _, r := range s.checked.take() {
		e := r.e
		if e.state != checking {
			continue
		}
		if r.v != publishRow {
			p.back(e)
		}
		switch r.v {
		case settledRow:
			e.state = settled
			p.drop(e)
			s.progress.Store(time.Now().UnixNano())
		case storedRow:
			e.state = acked
			p.drop(e)
			s.marks.push(markItem{e: e, kind: markDone, id: e.row.ID, xid: e.xid, attempts: e.attempts, stream: r.stream, seq: r.seq})
		case publishRow:
			e.state = queued
			// Another run may have published it at any time after its
			// commit: a retry reconciles from there.
			e.firstEmit = e.txTime.Add(-time.Duration(s.stream.clockOffset.Load()))
		}
	}
}

// emit hands the queued rows to the router, in window order, while the
// queue is not held and fewer than MaxInFlight messages await an outcome.
func (p *pipeline) emit(out chan<- *message.Message) {
	s := p.s
	var batch []watched
	first := false // a row handed over for the first time: rows moved
	defer func() {
		if first {
			s.progress.Store(time.Now().UnixNano()) // as a claim is, for the stall watch
		}
		if len(batch) > 0 {
			go s.watch(batch)
		}
	}()
	for !p.halted && !p.restarting && !p.closing && s.emitted.Load() < int64(s.cfg.MaxInFlight) {
		e, ok := p.win.cursor()
		if !ok {
			break
		}
		if !e.marker && e.state == checking {
			break // commit order: the rows after it wait for its check
		}
		if e.marker || e.state != queued {
			p.win.advance()
			continue
		}
		if key := e.row.OrderingKey.String; e.row.OrderingKey.Valid {
			if first := p.aside.before(key, e.row.ID); first != 0 {
				p.waitAside(e, first) // per-key order: it waits for the row set aside
				p.win.advance()
				continue
			}
			if probe, ok := p.aside.probing[key]; ok && probe != e.row.ID {
				break // a row of its key back from being set aside awaits its outcome
			}
		}
		msg, ok := p.message(e)
		if !ok {
			p.win.advance()
			continue // a dead letter
		}
		p.back(e)
		if e.probe {
			p.aside.probing[e.row.OrderingKey.String] = e.row.ID
		}
		select {
		case out <- msg:
		case <-s.closing:
			e.turn.Pass(false)
			e.attempts--
			e.msg, e.turn = nil, nil
			p.closing = true
			return
		}
		e.state = emitted
		if e.firstEmit.IsZero() {
			e.firstEmit, first = time.Now(), true
		}
		s.emitted.Add(1)
		batch = append(batch, watched{e: e, msg: msg, turn: e.turn, emitted: time.Now()})
		p.win.advance()
	}
}

// message builds the message of e's next attempt, or makes e a dead
// letter (and returns false) when it can never be published.
func (p *pipeline) message(e *entry) (*message.Message, bool) {
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
	row := e.row
	row.Attempt = e.attempts + 1
	if err != nil {
		p.dead(e, err.Error())
		return nil, false
	}
	d := source.NewDelivery(row, headers, s.cfg.Namespace)
	e.attempts++
	e.turn = sink.NewTurn(p.lastTurn)
	p.lastTurn = e.turn
	ctx := sink.WithTurn(telemetry.Parent(s.hardCtx, headers), e.turn)
	d.Deadline = time.Now().Add(s.cfg.AckDeadline)
	msg := source.NewMessage(ctx, d)
	e.msg = msg
	return msg, true
}

// outcome records what became of an emitted message.
func (p *pipeline) outcome(o outcome) {
	s := p.s
	e := o.e
	if e.msg != o.msg || e.state != emitted {
		return // cannot happen: one emission at a time per row
	}
	s.emitted.Add(-1)
	e.msg = nil
	if key := e.row.OrderingKey.String; e.probe && p.aside.probing[key] == e.row.ID {
		// Whatever came of it, the rows of its key after it may go on:
		// behind it again (a retry from the head of the window), or behind
		// it set aside again (waitAside).
		delete(p.aside.probing, key)
	}
	switch {
	case o.acked:
		out := source.OutcomeOf(o.msg)
		e.state = acked
		p.drop(e)
		s.marks.push(markItem{e: e, kind: markDone, id: e.row.ID, xid: e.xid, attempts: e.attempts, stream: out.Stream, seq: out.Seq, duplicate: out.Duplicate})
	case o.released:
		e.state, e.attempts = queued, e.attempts-1
	case o.unsent:
		// As the forwarder's own past-the-deadline path: not sent, the
		// attempt does not count.
		p.failed(e, fmt.Sprintf("%v: still waiting its hand-over to NATS at ack deadline %s; not sent, attempt not counted", source.ErrPublishDeadline, s.cfg.AckDeadline), source.Unavailable, false)
	case o.expired:
		// Neither acked nor nacked: NATS does not answer (frozen, or
		// gone without the client noticing), not the row's doing.
		p.failed(e, fmt.Sprintf("no ack or nack within ack deadline %s; publish outcome unknown", s.cfg.AckDeadline), source.Retryable, false)
	default:
		out := source.OutcomeOf(o.msg)
		e.holdFor = out.HoldFor
		// Only a failure the server's answer ties to the row is its own
		// (source.Outcome.Own): a stream in an outage, a timeout or a 503
		// no responders alone (a server shutting down answers it for
		// every subject) may be the whole destination's, and hold the
		// queue.
		p.failed(e, out.Reason(), out.Class, out.Own)
	}
}

// failed handles a failed attempt of e; own: the failure was the row's
// (a nack, its stream refusing it, the guard finding its stream unsafe),
// not NATS or the stream's cluster not answering. A failure of its own
// sets the row aside (aside.go): the rows after it go on. Any other holds
// the queue, uncharged.
func (p *pipeline) failed(e *entry, reason string, class source.FailureClass, own bool) {
	s := p.s
	e.lastErr = reason
	switch {
	case class == source.Permanent:
		p.dead(e, reason)
	case class == source.Unavailable:
		s.Counters.Unavailable.Add(1)
		e.state = queued
		p.hold(e, unavailableWait, true, class)
		e.attempts-- // not the row's fault: the attempt does not count
	case class == source.Held:
		// Its stream refuses it for now: the duplicate-window guard finds
		// the stream unsafe (own), or the stream has no leader or quorum.
		// Not the row's fault: the attempt does not count.
		s.Counters.Held.Add(1)
		e.attempts--
		// A stream without a leader holds its rows for broker.OutageHoldBack
		// (the Outcome's HoldFor), the guard for HoldBack.
		hold := cmp.Or(e.holdFor, s.cfg.HoldBack)
		e.holdFor = 0
		p.retryAfter(e, reason, hold, class, own)
	case e.attempts >= s.cfg.MaxAttempts:
		p.dead(e, fmt.Sprintf("gave up after %d attempts (relay.max_attempts); last error: %s", e.attempts, reason))
	default:
		s.Counters.Failed.Add(1)
		p.retryAfter(e, reason, s.backoff(e.attempts), class, own)
	}
}

// retryAfter tries e again after wait: set aside (own: a failure of its
// own), or holding the queue with its failed mark written.
func (p *pipeline) retryAfter(e *entry, reason string, wait time.Duration, class source.FailureClass, own bool) {
	if own {
		p.setAside(e, reason, wait, 0)
		return
	}
	e.state = queued
	p.hold(e, wait, false, class)
	p.s.marks.push(p.failedMark(e, reason, wait))
}

// failedMark is e's failed mark: its error, attempts and backoff, and its
// first publish (database clock) for a later reconcile.
func (p *pipeline) failedMark(e *entry, reason string, backoff time.Duration) markItem {
	m := markItem{e: e, kind: markFailed, id: e.row.ID, xid: e.xid, attempts: e.attempts, reason: reason, backoff: backoff}
	if !e.firstEmit.IsZero() {
		m.first = e.firstEmit.Add(time.Duration(p.s.stream.clockOffset.Load()))
	}
	return m
}

// setAside sets e aside (aside.go) for wait: marked failed, out of the
// window once the mark is written, back by the sweep. waitsFor is the
// earlier row of its ordering key it waits for; 0: it failed itself.
func (p *pipeline) setAside(e *entry, reason string, wait time.Duration, waitsFor int64) {
	s := p.s
	e.state = aside
	p.drop(e)
	p.aside.add(e.row.ID, &asideRow{key: e.row.OrderingKey.String, reason: reason, waits: waitsFor != 0, due: time.Now().Add(wait)})
	s.asideSum.Store(p.aside.summary())
	s.Counters.SetAside.Add(1)
	m := p.failedMark(e, reason, wait)
	m.aside = true
	s.marks.push(m)
	if waitsFor != 0 {
		s.logger.Debug("row set aside: it waits for an earlier row of its ordering key", slog.Int64("row_id", e.row.ID), slog.Int64("waits_for", waitsFor))
		return
	}
	s.logger.Warn("publish failed; the row is set aside (marked failed, retried by the sweep after its backoff) and the rows after it go on; the later rows of its ordering key wait for it",
		slog.Int64("row_id", e.row.ID), slog.Int("attempt", e.attempts), slog.String("error", reason), slog.Duration("retry_in", wait))
}

// waitsPrefix starts the last_error of a row set aside behind an earlier
// row of its ordering key (waitAside); loadAsides reads it back.
const waitsPrefix = "waits for row "

// waitAside sets e aside behind first, the row of its ordering key set
// aside before it: it comes back with it, when its backoff ends.
func (p *pipeline) waitAside(e *entry, first int64) {
	head := p.aside.rows[first]
	reason := fmt.Sprintf(waitsPrefix+"%d of its ordering key, set aside: %s", first, head.reason)
	p.setAside(e, reason, max(time.Until(head.due), 0), first)
}

// comesBack notes that e, in the window again, was set aside: set aside
// for a failure of its own, and of an ordering key, it is a probe
// (aside.go). It stays among the rows set aside until it is handed over
// (back): rows of its key that wait in the window ahead of it (read while
// the queue was held) still wait for it.
func (p *pipeline) comesBack(e *entry) {
	if r := p.aside.rows[e.row.ID]; r != nil {
		e.back, e.probe = true, e.row.OrderingKey.Valid && !r.waits
	}
}

// back takes e, handed over or settled, out of the rows set aside when it
// came back from them.
func (p *pipeline) back(e *entry) {
	if e.back {
		e.back = false
		p.aside.take(e.row.ID)
		p.s.asideSum.Store(p.aside.summary())
	}
}

// hold stops emission until every message in flight has its outcome, wait
// has passed and, with connected, NATS is connected; then the rows from
// the first one without a PubAck on are emitted again, in order. The
// destination does not take rows (NATS unavailable or not answering, the
// stream without a leader): the rows are not moving and the stall watch
// counts on: the stall timer measures rows, not connections.
func (p *pipeline) hold(e *entry, wait time.Duration, connected bool, class source.FailureClass) {
	until := time.Now().Add(wait)
	if !p.halted {
		p.retryAt = until
		p.s.logger.Warn("publish failed; holding the rows after it until it is published (commit order)",
			slog.Int64("row_id", e.row.ID), slog.Int("attempt", e.attempts),
			slog.String("class", string(class)), slog.String("error", e.lastErr), slog.Duration("retry_in", wait))
	} else if until.After(p.retryAt) {
		p.retryAt = until
	}
	p.halted = true
	p.waitConnected = p.waitConnected || connected
	p.s.waitingNATS.Store(p.waitConnected)
}

// resume lets a held queue go on once its conditions are met.
func (p *pipeline) resume() {
	s := p.s
	if !p.halted || s.emitted.Load() > 0 || time.Now().Before(p.retryAt) {
		return
	}
	if p.waitConnected && !s.cfg.Connected() {
		return
	}
	p.halted, p.waitConnected = false, false
	s.waitingNATS.Store(false)
	p.win.rewind()
	// A new chain of turns: the old one is broken where the failure was
	// (a message not handed over refuses every later one), and what is
	// left of it cannot send any more.
	p.lastTurn = nil
	p.reconcile()
}

// unavailableWait is the least wait before rows that failed because NATS
// was unavailable (or refused them, or they missed their publish
// deadline) are emitted again.
const unavailableWait = 100 * time.Millisecond

// reconcile looks up in their stream the rows about to be emitted again
// whose first publish may have been stored beyond the stream's duplicate
// window (see dedup.Reconciler): JetStream would store them again. The rows
// found are settled as relayed instead of published. It runs while the
// queue is held (nothing is in flight), so blocking the pipeline for the
// scan, bounded by dedup.reconcile_timeout, costs nothing else; on any
// error the rows are published as usual.
func (p *pipeline) reconcile() {
	s := p.s
	if s.cfg.Reconciler == nil {
		return
	}
	now := time.Now()
	var candidates []dedup.Candidate
	byID := map[int64]*entry{}
	for _, e := range p.win.live() {
		if e.marker || e.state != queued || e.firstEmit.IsZero() {
			continue
		}
		candidates = append(candidates, dedup.Candidate{ID: e.row.ID, IdempotencyKey: e.row.IdempotencyKey, Subject: e.row.Subject, FirstClaimedAt: e.firstEmit, ClaimedAt: now})
		byID[e.row.ID] = e
	}
	found, _ := source.FindInDoubt(s.hardCtx, s.cfg.Reconciler, candidates, s.logger, "reconcile")
	for id, stored := range found {
		e := byID[id]
		p.back(e)
		e.state = acked
		p.drop(e)
		s.marks.push(markItem{e: e, kind: markDone, id: id, xid: e.xid, attempts: e.attempts, stream: stored.Stream, seq: stored.Seq})
	}
}

// dead makes e a dead letter.
func (p *pipeline) dead(e *entry, reason string) {
	p.back(e) // a dead letter holds nothing back
	e.state = dead
	p.drop(e)
	p.s.logger.Warn("row is a dead letter", slog.Int64("row_id", e.row.ID), slog.Int("attempt", e.attempts), slog.String("error", reason))
	p.s.marks.push(markItem{e: e, kind: markDead, id: e.row.ID, xid: e.xid, attempts: e.attempts, reason: reason})
}

// restart begins a stream restart; it completes (reset) once every emitted
// message has its outcome.
func (p *pipeline) restart() {
	if p.s.emitted.Load() > 0 {
		return
	}
	p.reset()
}

// reset empties the window for a new stream session: the server sends
// again every transaction after its confirmed position. Unsettled rows of
// the old window wait in adopt, so that a row read again keeps what
// happened to it (published, dead, attempts); settled ones go to resent,
// so that they are skipped; swept rows, which the stream does not send,
// stay in the window.
func (p *pipeline) reset() {
	// Rows adopted (or settled) at an earlier restart and not read again
	// yet stay (restarts can follow each other faster than the rows come
	// back), unless their transaction is confirmed: the server will not
	// send it.
	confirmed := p.s.confirmed.Load()
	adopt := make(map[int64]*entry, p.win.size()+len(p.adopt))
	for id, e := range p.adopt {
		if uint64(e.txLSN) >= confirmed {
			adopt[id] = e
		}
	}
	p.resent.keep(pglogrepl.LSN(confirmed))
	p.resent = append(p.resent, p.popped...)
	p.popped = p.popped[:0]
	var keep []*entry
	for _, e := range p.win.live() {
		switch {
		case e.marker:
		case e.swept:
			keep = append(keep, e)
		case e.state == settled:
			p.release(e)
			p.resent.add(e.row.ID, e.txLSN)
		default:
			p.release(e) // its payload comes again with it
			if e.state == checking {
				e.state = queued // checked again if read again before checkBelow
			}
			adopt[e.row.ID] = e
		}
	}
	p.resent.normalize()
	p.adopt = adopt
	p.win.clear()
	if p.watermark != nil {
		// The watermark may not come: a slot created again starts after it.
		close(p.watermark.ids)
		p.watermark = nil
	}
	for _, e := range keep {
		p.push(e)
	}
	p.inTx, p.skipTx = false, false
	p.restarting = false
}

// notComing runs when the sweep's watermark arrives: the rows still in
// adopt will not be read again. The watermark was requested after the
// last restart (a restart closes the request) and written after that, so
// every row in adopt, read in an earlier session, committed before it;
// the stream delivers in commit order everything after the slot's
// position, so a row it sends again came before the watermark and left
// adopt. What is left lies before the slot's position: the slot was
// dropped and created again (or its position set by hand). Settled rows
// are forgotten; rows with an outcome (acked, dead) stay held until their
// marks settle them (settle forgets them then); queued rows are no longer
// held, so the sweep publishes them, with their state (appendSwept).
func (p *pipeline) notComing() {
	for id, e := range p.adopt {
		if e.state == settled {
			delete(p.adopt, id)
			continue
		}
		e.lost = true
	}
}

// ids returns the ids of every row the pipeline holds (the window and the
// rows waiting to be read again), less the rows waiting to be swept
// (notComing).
func (p *pipeline) ids() map[int64]bool {
	ids := make(map[int64]bool, p.win.size()+len(p.adopt))
	for _, e := range p.win.live() {
		if !e.marker {
			ids[e.row.ID] = true
		}
	}
	for id, e := range p.adopt {
		if !e.lost || e.state != queued {
			ids[id] = true
		}
	}
	return ids
}

// sweep takes a request of the sweeper: wait for a watermark, or append
// swept rows.
func (p *pipeline) sweep(r sweepRequest) {
	if r.gone != nil {
		var release []int64
		for _, id := range r.gone {
			if a := p.aside.rows[id]; a != nil && a.marked {
				p.aside.take(id)
				if !a.waits && a.key != "" {
					release = append(release, p.aside.release(a.key)...)
				}
			}
		}
		p.s.asideSum.Store(p.aside.summary())
		r.released <- release
		return
	}
	if r.token != "" {
		p.watermark = &r
		return
	}
	p.appending = &r
	p.appendSwept()
}

// appendSwept appends the swept rows that wait, while the budget has room
// for them; meanwhile the reader waits behind them.
func (p *pipeline) appendSwept() {
	r, b := p.appending, p.s.budget
	for len(r.rows) > 0 {
		size := rowSize(&r.rows[0])
		if !b.take(size, true) {
			b.setSwept(true)
			return
		}
		e := &entry{row: r.rows[0], swept: true, txTime: r.rows[0].CreatedAt, attempts: r.rows[0].Attempt, charged: true, size: size}
		if !e.row.FirstClaimedAt.IsZero() {
			// Published before (set aside, or by a relay of source: table):
			// a failure from here on reconciles from that publish on.
			e.firstEmit = e.row.FirstClaimedAt.Add(-time.Duration(p.s.stream.clockOffset.Load()))
		}
		if a, ok := p.adopt[e.row.ID]; ok && a.lost && a.state == queued {
			// A row the slot will not deliver again (notComing): it
			// keeps its attempts and its first publish (reconcile).
			delete(p.adopt, e.row.ID)
			e.attempts, e.firstEmit, e.lastErr = max(e.attempts, a.attempts), a.firstEmit, a.lastErr
		}
		if stored, ok := r.stored[e.row.ID]; ok {
			// Found in its stream by the sweep's reconcile: settled as
			// relayed, not published again.
			p.comesBack(e)
			p.back(e)
			e.state = acked
			p.push(e)
			p.drop(e)
			p.s.marks.push(markItem{e: e, kind: markDone, id: e.row.ID, attempts: e.attempts, stream: stored.Stream, seq: stored.Seq})
			r.rows = r.rows[1:]
			continue
		}
		p.comesBack(e)
		p.push(e)
		r.rows = r.rows[1:]
	}
	b.setSwept(false)
	close(r.appended)
	p.appending = nil
}
