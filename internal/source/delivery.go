package source

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Delivery is one row or envelope a source hands to the forwarder, and
// where the forwarder reports what became of it. A source creates one per
// row and puts it, alone (With) or in a Batch (WithBatch), in the context
// of the Watermill message it emits. Whoever hands its message to the NATS
// client calls Handover right before: a source that gives up on a
// delivery at its deadline gives the attempt back when it was not handed
// over (Take, TakeUnsent).
type Delivery struct {
	// Subject is the NATS subject to publish to.
	Subject string
	// Deadline is the last moment the message may be handed to the NATS
	// client (see CheckDeadline): when the source stops waiting for its
	// outcome. Zero: no deadline.
	Deadline time.Time
	// Msg, when set, is the NATS message to publish, built by the source
	// (Subject, Data, Header). Nil: the forwarder has the sink's Marshaler
	// build it from the Watermill message that carries the delivery (a
	// source of plain Watermill messages, one delivery each).
	Msg *nats.Msg
	// Context, when set, is the delivery's own context: its trace (the
	// publish span becomes its child) and its turn of hand-over
	// (sink.WithTurn). Nil: the context of the message.
	Context context.Context

	outcome Outcome
	state   atomic.Uint32 // open, sent, then taken (by a report or by the source), then reported
	batch   *Batch
	index   int
}

// The states of a Delivery: open (not handed to the NATS client), sent
// (Handover let the forwarder hand it over), taken (its outcome is being
// reported, or its source took it over), reported.
const (
	open uint32 = iota
	sent
	taken
	reported
)

// Batch is the deliveries of one Watermill message, in the order the
// forwarder hands them to the NATS client: one for most sources, a
// claimed batch of rows for the table source.
type Batch struct {
	deliveries []*Delivery
	reported   func(i int)
	left       atomic.Int64
	one        [1]*Delivery // the deliveries of a batch of one (With)

	mu     sync.Mutex
	done   chan struct{} // made by the first Done
	closed bool          // every delivery is settled
}

// NewBatch returns the batch of ds. reported, when set, is called with
// the index of each delivery whose outcome the forwarder reported, right
// after the report, on the forwarder's goroutine: a source settles rows
// there one by one as their outcomes come, without waiting for the rest
// of the batch.
func NewBatch(ds []*Delivery, reported func(i int)) *Batch {
	b := &Batch{reported: reported}
	b.init(ds)
	return b
}

func (b *Batch) init(ds []*Delivery) {
	b.deliveries = ds
	for i, d := range ds {
		d.batch, d.index = b, i
	}
	b.left.Store(int64(len(ds)))
	b.closed = len(ds) == 0
}

// Len is the number of deliveries.
func (b *Batch) Len() int { return len(b.deliveries) }

// At returns delivery i.
func (b *Batch) At(i int) *Delivery { return b.deliveries[i] }

// Done is closed once every delivery of the batch was reported or taken
// over by its source. (Made on demand: most batches of one are never
// waited on this way.)
func (b *Batch) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		b.done = make(chan struct{})
		if b.closed {
			close(b.done)
		}
	}
	return b.done
}

// settledOne counts a delivery out of the batch.
func (b *Batch) settledOne() {
	if b.left.Add(-1) != 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.done != nil {
		close(b.done)
	}
}

type batchKey struct{}

// With returns ctx carrying d alone; give it to the message the source
// emits (message.Message.SetContext).
func With(ctx context.Context, d *Delivery) context.Context {
	b := new(Batch)
	b.one[0] = d
	b.init(b.one[:])
	return WithBatch(ctx, b)
}

// WithBatch returns ctx carrying b; give it to the message the source
// emits.
func WithBatch(ctx context.Context, b *Batch) context.Context {
	return context.WithValue(ctx, batchKey{}, b)
}

// NewMessage returns the Watermill message of d alone, for a source that
// emits one message per row: no payload (d.Msg holds it), the UUID d.Msg's
// Nats-Msg-Id, and ctx carrying d.
func NewMessage(ctx context.Context, d *Delivery) *message.Message {
	var id string
	if d.Msg != nil {
		id = d.Msg.Header.Get(jetstream.MsgIDHeader)
	}
	msg := message.NewMessage(id, nil)
	msg.SetContext(With(ctx, d))
	return msg
}

// BatchOf returns the batch msg carries, or nil.
func BatchOf(msg *message.Message) *Batch {
	b, _ := msg.Context().Value(batchKey{}).(*Batch)
	return b
}

// Of returns the delivery msg carries (the first of its batch), or nil.
func Of(msg *message.Message) *Delivery {
	if b := BatchOf(msg); b != nil && len(b.deliveries) > 0 {
		return b.deliveries[0]
	}
	return nil
}

// Index is the delivery's place in its batch.
func (d *Delivery) Index() int { return d.index }

// Report records o as the outcome of d and, when d is in a batch with a
// reported hook, calls it. The first of Report and Take counts: it
// returns false when d was reported or taken over already. Safe on a nil
// Delivery (a message no source emitted).
func (d *Delivery) Report(o Outcome) bool {
	if d == nil || !d.state.CompareAndSwap(open, taken) && !d.state.CompareAndSwap(sent, taken) {
		return false
	}
	d.outcome = o
	d.state.Store(reported)
	if b := d.batch; b != nil {
		if b.reported != nil {
			b.reported(d.index)
		}
		b.settledOne()
	}
	return true
}

// Take takes d over for its source, which settles it by itself (its ack
// deadline passed, or a drain gave up on it): a later Report does not
// count, and a later Handover refuses to send it. It returns false when d
// was reported (or taken) already; wasSent says whether the forwarder had
// handed d to the NATS client (Handover): when not, it never will, and
// the attempt was not made.
func (d *Delivery) Take() (ok, wasSent bool) {
	switch {
	case d.state.CompareAndSwap(open, taken):
	case d.state.CompareAndSwap(sent, taken):
		wasSent = true
	default:
		return false, false
	}
	if d.batch != nil {
		d.batch.settledOne()
	}
	return true, wasSent
}

// TakeUnsent takes d over, as Take does, only when it was neither handed
// to the NATS client (Handover) nor reported: the source gives its
// attempt back, and the forwarder will not send it. A source that must
// still learn the outcome of a message that was sent (the postgres-wal
// source, whose coalesced messages are acked or nacked by the report)
// leaves the others open. It returns whether it took d.
func (d *Delivery) TakeUnsent() bool {
	if d == nil || !d.state.CompareAndSwap(open, taken) {
		return false
	}
	if d.batch != nil {
		d.batch.settledOne()
	}
	return true
}

// ErrTaken is returned (wrapped in ErrPublishDeadline's error) by
// Handover for a delivery its source took over before it was sent.
var ErrTaken = errors.New("taken over by its source at its publish deadline before it was handed to the NATS client")

// Handover is called last before d is handed to the NATS client: it
// returns CheckDeadline's error, or one wrapping ErrPublishDeadline and
// ErrTaken when d's source took it over already (Take, TakeUnsent: the
// deadline passed while d waited its turn in the forwarder). Otherwise it
// marks d sent, atomically against Take: whichever comes first wins, so a
// source that takes d over knows whether the attempt was made. Safe on a
// nil Delivery (nil).
func (d *Delivery) Handover() error {
	if d == nil {
		return nil
	}
	if err := d.CheckDeadline(); err != nil {
		return err
	}
	if !d.state.CompareAndSwap(open, sent) {
		return fmt.Errorf("%w: %w", ErrPublishDeadline, ErrTaken)
	}
	return nil
}

// Outcome returns the outcome reported for d, and whether one was.
func (d *Delivery) Outcome() (Outcome, bool) {
	if d.state.Load() != reported {
		return Outcome{}, false
	}
	return d.outcome, true
}

// ErrPublishDeadline is returned (wrapped) by CheckDeadline for a message
// past its delivery's Deadline.
var ErrPublishDeadline = errors.New("not published: the message is older than the ack deadline")

// CheckDeadline returns an error wrapping ErrPublishDeadline when d is
// past its Deadline: the moment its source emitted it plus
// relay.ack_deadline, when the source stops waiting for its outcome and
// settles the row (ack_deadline is shorter than the table source's lease,
// relay.inflight_timeout). Call it right before handing the message to
// the NATS client; a nil delivery or one without a deadline passes.
//
// A relay that was paused (SIGSTOP, a frozen container, a long GC or swap
// stall) with rows still in its pipeline must not publish them when it
// resumes: their lease may have expired, another relay may have published
// them since, and past the stream's duplicate window JetStream would store
// the late copy again, after later rows of its ordering key. The deadline
// is checked on the monotonic clock and on the wall clock, so that a
// suspended machine, whose monotonic clock may have stood still, is caught
// too.
func (d *Delivery) CheckDeadline() error {
	if d == nil || d.Deadline.IsZero() {
		return nil
	}
	now := time.Now()
	late := max(now.Sub(d.Deadline), now.Round(0).Sub(d.Deadline.Round(0)))
	if late <= 0 {
		return nil
	}
	return fmt.Errorf("%w (%s late): the relay was paused or stalled, and another relay may have published the row since", ErrPublishDeadline, late.Round(time.Millisecond))
}

// CheckDeadline is the CheckDeadline of the delivery msg carries.
func CheckDeadline(msg *message.Message) error { return Of(msg).CheckDeadline() }
