package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// sweepInterval is how often Batch.Wait, blocked on the oldest message,
// looks at the others: PubAcks come back mostly in publish order, so
// waiting on the oldest settles nearly all of them, and a sweep settles
// the ones acked out of order behind a slow one.
const sweepInterval = 20 * time.Millisecond

// Batch is a group of messages handed to the NATS client one after
// another (Send) whose PubAcks are then awaited together (Wait), by one
// goroutine: no goroutine, channel hand-off or timer per message. Begin
// starts it, End ends it; it is not safe for concurrent use.
type Batch struct {
	p    *Publisher
	ctx  context.Context
	pend []pending
	late bool // some message is marked late
	// reaped: the messages before it were reported by Reap, or not sent.
	reaped int
}

// pending is one message of a Batch.
type pending struct {
	future  jetstream.PubAckFuture // nil: not sent, or its outcome is reported
	subject string
	began   time.Time
	end     time.Time // when the wait for its PubAck ends (Publisher.waitEnd)
	// late is the timeout of a message that got no PubAck in time, set
	// until flushLate reports it with the other late ones.
	late error
}

// noRetry is jetstream.WithRetryAttempts(0), made once.
var noRetry = jetstream.WithRetryAttempts(0)

var batchPool = sync.Pool{New: func() any { return new(Batch) }}

// Begin starts a batch of n messages awaited under ctx (ctx's end fails
// the messages still waiting). Close waits for the batches in progress.
// Errors: ErrClosed.
func (p *Publisher) Begin(ctx context.Context, n int) (*Batch, error) {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return nil, ErrClosed
	}
	b := batchPool.Get().(*Batch)
	b.p, b.ctx = p, ctx
	if cap(b.pend) < n {
		b.pend = make([]pending, n)
	}
	b.pend = b.pend[:n]
	return b, nil
}

// Send hands message i of the batch, m, to the NATS client. ctx is the
// message's own context: when it carries a Turn (WithTurn), m is handed
// over only after the previous turn's message was, and its turn passes as
// soon as it was (or as not sent, when Send fails first). check, when
// set, is called last before the hand-over (the publish deadline); its
// error stops the send. by, when not zero, is when m's outcome is due
// (its source's ack deadline): m's PubAck is awaited until shortly before
// it at most, and a wait so cut short fails with ErrAckDeadline
// (Publisher.waitEnd).
//
// It never retries by itself (jetstream.WithRetryAttempts(0)): a retry
// inside the client could land after later messages and break per-key
// order. Errors: ErrTurnBroken, check's, ErrNotSent, the client's
// (nats.ErrMaxPayload, nats.ErrBadSubject, …). Nothing was sent when Send
// fails.
func (b *Batch) Send(ctx context.Context, i int, m *nats.Msg, check func() error, by time.Time) (err error) {
	turn := turnFrom(ctx)
	if turn != nil {
		defer func() { turn.Pass(err == nil) }() // the next one may follow, or is refused
		if !turn.wait(ctx) {
			return ErrTurnBroken
		}
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	p := b.p
	p.noteSubject(m.Subject)
	began := time.Now()
	future, err := p.js.PublishMsgAsync(m, noRetry)
	if err != nil {
		if p.cfg.Conn != nil && p.cfg.Conn.IsClosed() {
			// nats.go says "error creating async reply handler: nats:
			// connection closed" without wrapping nats.ErrConnectionClosed.
			return fmt.Errorf("publish to %s: %w (%v)", m.Subject, ErrNotSent, err)
		}
		return fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	b.pend[i] = pending{future: future, subject: m.Subject, began: began, end: p.waitEnd(began, by)}
	return nil
}

// deadlineReserve is the most of the time before a message's outcome is
// due that its PubAck wait leaves for reporting it to its source.
const deadlineReserve = 200 * time.Millisecond

// waitEnd is when the wait for the PubAck of a message sent at began ends:
// PublishTimeout after the send, or earlier when its outcome is due by
// (its source's ack deadline; zero: no such time) sooner: deadlineReserve
// before by, or half the time left when less is left. Such a message,
// handed over late in a long batch (or after its turn waited), fails with
// ErrAckDeadline if its PubAck has not come by then. Its wait used to run
// past by: its source gave up on it first and counted the attempt as
// "outcome unknown", even while the broker was out, where an outage's
// failure is not counted.
func (p *Publisher) waitEnd(began, by time.Time) time.Time {
	end := began.Add(p.cfg.PublishTimeout)
	if by.IsZero() {
		return end
	}
	reserve := max(0, min(deadlineReserve, by.Sub(began)/2))
	if due := by.Add(-reserve); due.Before(end) {
		return due
	}
	return end
}

// Wait waits for the PubAck of every message sent and calls done with
// each message's index and PubAck, or its error, and the time since its
// send, as soon as it is known: at most PublishTimeout after its send, or
// when the batch's context ends or the connection closes for good. The
// errors are PublishMsg's.
//
// It waits on the last message whose outcome is not known: PubAcks come
// back mostly in publish order, so when the last one is in, nearly all
// are, and one pass reports them. The goroutine wakes about once per
// batch, not once per PubAck. Every sweepInterval it looks at the others,
// so that a message acked (or failed) long before a slow last one is
// reported without waiting for it.
func (b *Batch) Wait(done func(i int, ack *jetstream.PubAck, err error, took time.Duration)) {
	p := b.p
	timer := timerPool.Get().(*time.Timer)
	defer func() {
		timer.Stop()
		timerPool.Put(timer)
	}()
	var sweep *time.Ticker
	defer func() {
		if sweep != nil {
			sweep.Stop()
		}
	}()
	for first := 0; ; {
		// One pass: report what is known, find the first and the last
		// message still waiting.
		last := -1
		var end time.Time // the earliest end of a wait
		for i := first; i < len(b.pend); i++ {
			if !b.poll(i, done) {
				last = i
				if w := &b.pend[i]; end.IsZero() || w.end.Before(end) {
					end = w.end
				}
			} else if i == first {
				first++
			}
		}
		b.flushLate(done)
		for first < len(b.pend) && b.pend[first].future == nil {
			first++
		}
		if first == len(b.pend) {
			return
		}
		if last < first || b.pend[last].future == nil {
			continue // flushLate reported it
		}
		w := &b.pend[last]
		var sweeps <-chan time.Time
		if last > first { // others to sweep
			if sweep == nil {
				sweep = time.NewTicker(sweepInterval)
			}
			sweeps = sweep.C
		}
		timer.Reset(time.Until(end))
		select {
		case ack := <-w.future.Ok():
			b.finish(last, ack, nil, done)
		case err := <-w.future.Err():
			b.failed(last, err, done)
		case <-timer.C:
			b.late = true // flushLate finds the messages past their timeout
		case <-sweeps:
		case <-b.ctx.Done():
			for i := first; i < len(b.pend); i++ {
				if w := &b.pend[i]; w.future != nil && !b.poll(i, done) {
					b.finish(i, nil, fmt.Errorf("publish to %s: %w", w.subject, b.ctx.Err()), done)
				}
			}
		case <-p.connClosed:
			for i := first; i < len(b.pend); i++ {
				if w := &b.pend[i]; w.future != nil && !b.poll(i, done) {
					b.finish(i, nil, p.closedErr(w.subject), done)
				}
			}
		}
		timer.Stop() // since Go 1.23 no stale tick survives Stop
	}
}

// Reap reports, as Wait does, the outcomes already known of messages
// 0 to upto-1, oldest first, up to the first one still waiting; it does
// not wait. Call it between Sends: a PubAck that came back while the rest
// of a long batch is still being handed over is reported at once, not
// after the last hand-over, which may come after the source's ack
// deadline (the row's outcome would then be unknown).
func (b *Batch) Reap(upto int, done func(i int, ack *jetstream.PubAck, err error, took time.Duration)) {
	for ; b.reaped < upto; b.reaped++ {
		if b.pend[b.reaped].future != nil && !b.poll(b.reaped, done) {
			return
		}
	}
}

// End ends the batch, waited for or not (a panic between Begin and Wait);
// b must not be used again.
func (b *Batch) End() {
	p := b.p
	if p == nil {
		return
	}
	clear(b.pend)
	b.p, b.ctx, b.late, b.reaped = nil, nil, false, 0
	batchPool.Put(b)
	p.mu.RUnlock()
}

// poll reports message i's outcome when it is known already, and whether
// it is; a timeout is left for flushLate.
func (b *Batch) poll(i int, done func(int, *jetstream.PubAck, error, time.Duration)) bool {
	w := &b.pend[i]
	if w.future == nil || w.late != nil {
		return true
	}
	select {
	case ack := <-w.future.Ok():
		b.finish(i, ack, nil, done)
	case err := <-w.future.Err():
		b.failed(i, err, done)
	default:
		return false
	}
	return true
}

// failed reports the error of message i's future, but leaves a timeout of
// the client's own (jetstream.WithPublishAsyncTimeout) for flushLate.
func (b *Batch) failed(i int, err error, done func(int, *jetstream.PubAck, error, time.Duration)) {
	if errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
		b.pend[i].late, b.late = err, true
		return
	}
	b.finish(i, nil, fmt.Errorf("publish to %s: %w", b.pend[i].subject, err), done)
}

func (b *Batch) finish(i int, ack *jetstream.PubAck, err error, done func(int, *jetstream.PubAck, error, time.Duration)) {
	w := &b.pend[i]
	w.future, w.late = nil, nil
	done(i, ack, err, time.Since(w.began))
}

// flushLate reports the messages that got no PubAck in time — those
// marked late, and every other one past its PublishTimeout — as PublishMsg
// does: the server's permission violation for the subject, the server not
// answering (ErrUnresponsive), or the timeout. Whether the server answered
// since a publish is asked once, with a wait, for the latest of them: a
// PING answered after it was sent after each of the others too; only when
// it was not are the others asked, without waiting again. One frozen
// server costs a batch one wait, not one per message.
func (b *Batch) flushLate(done func(int, *jetstream.PubAck, error, time.Duration)) {
	if !b.late {
		return
	}
	b.late = false
	p := b.p
	var late []int
	now := time.Now()
	for i := range b.pend {
		w := &b.pend[i]
		if w.future == nil {
			continue
		}
		if w.late == nil && !now.Before(w.end) && !b.poll(i, done) {
			w.late = p.noPubAck(w)
		}
		if w.late != nil {
			late = append(late, i)
		}
	}
	answered, asked := true, false
	for k := len(late) - 1; k >= 0; k-- {
		w := &b.pend[late[k]]
		var err error
		switch denied := p.denied(w.subject, w.began); {
		case denied != nil:
			err = fmt.Errorf("publish to %s: %w", w.subject, denied)
		case errors.Is(w.late, ErrAckDeadline):
			// Cut short: the server is not suspected, and no time is left
			// to ask it.
			err = fmt.Errorf("publish to %s: %w", w.subject, w.late)
		default:
			if answered = answered && p.answered(w.began, !asked); !answered {
				err = fmt.Errorf("publish to %s: %w (%v)", w.subject, ErrUnresponsive, w.late)
			} else {
				err = fmt.Errorf("publish to %s: %w", w.subject, w.late)
			}
			asked = true
		}
		b.finish(late[k], nil, err, done)
	}
}

// noPubAck is the error of w, whose PubAck did not come by its wait's end:
// ErrAckDeadline when its ack deadline cut the wait short, the timeout
// otherwise.
func (p *Publisher) noPubAck(w *pending) error {
	if waited := w.end.Sub(w.began); waited < p.cfg.PublishTimeout {
		return fmt.Errorf("%w (waited %s of %s; outcome unknown, attempt not counted)", ErrAckDeadline, waited.Round(time.Millisecond), p.cfg.PublishTimeout)
	}
	return fmt.Errorf("no PubAck within %s: %w", p.cfg.PublishTimeout, jetstream.ErrAsyncPublishTimeout)
}

// answered asks Config.Answered whether the server answered a PING sent
// after since; it waits up to answeredWait for a PONG only when wait is
// set. Without Config.Answered, true.
func (p *Publisher) answered(since time.Time, wait bool) bool {
	if p.cfg.Answered == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), answeredWait)
	if !wait {
		cancel()
	}
	defer cancel()
	return p.cfg.Answered(ctx, since)
}

// failed is the error of a publish whose future failed: a timeout of the
// client's own (jetstream.WithPublishAsyncTimeout) said as PublishMsg
// says it, any other error wrapped with the subject.
func (p *Publisher) failed(subject string, began time.Time, err error) error {
	if errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
		return p.timedOut(subject, began, err)
	}
	return fmt.Errorf("publish to %s: %w", subject, err)
}

// closedErr is the error of a publish awaiting its PubAck when the
// connection closed for good (see Config.Conn).
func (p *Publisher) closedErr(subject string) error {
	last := p.cfg.Conn.LastError()
	if lineTooLong(last) {
		if int64(len(subject)) < p.longest.Load() {
			return fmt.Errorf("publish to %s: %w (%v)", subject, ErrClosedByAnother, last)
		}
		return fmt.Errorf("publish to %.80s: %w (subject of %d bytes; %v); shorten the subject or raise the server's max_control_line, then bridge retry",
			subject, ErrLineTooLong, len(subject), last)
	}
	return fmt.Errorf("publish to %s: %w (%v)", subject, nats.ErrConnectionClosed, last)
}

// Marshal builds the NATS message of msg with the publisher's Marshaler.
func (p *Publisher) Marshal(subject string, msg *message.Message) (*nats.Msg, error) {
	m, err := p.cfg.Marshaler.Marshal(subject, msg)
	if err != nil {
		return nil, fmt.Errorf("marshal message %s: %w", msg.UUID, err)
	}
	return m, nil
}
