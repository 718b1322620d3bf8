package source

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Delivery is what a source says about one message it emits, and where
// the forwarder reports what became of it. A source creates one per
// emitted message and puts it in the message's context (With).
type Delivery struct {
	// Subject is the NATS subject to publish the message to.
	Subject string
	// Deadline is the last moment the message may be handed to the NATS
	// client (see CheckDeadline): when the source stops waiting for its
	// outcome. Zero: no deadline.
	Deadline time.Time

	outcome  Outcome
	claimed  atomic.Bool // a report began
	reported atomic.Bool // outcome is written
}

type deliveryKey struct{}

// With returns ctx carrying d; give it to the message the source emits
// (message.Message.SetContext).
func With(ctx context.Context, d *Delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}

// Of returns the delivery msg carries, or nil.
func Of(msg *message.Message) *Delivery {
	d, _ := msg.Context().Value(deliveryKey{}).(*Delivery)
	return d
}

// Report records o as the outcome of d. The forwarder reports once, then
// acks the message (published) or nacks it (failed); the first report
// counts. Safe on a nil Delivery (a message no source emitted).
func (d *Delivery) Report(o Outcome) {
	if d == nil || !d.claimed.CompareAndSwap(false, true) {
		return
	}
	d.outcome = o
	d.reported.Store(true)
}

// ErrPublishDeadline is returned (wrapped) by CheckDeadline for a message
// past its delivery's Deadline.
var ErrPublishDeadline = errors.New("not published: the message is older than the ack deadline")

// CheckDeadline returns an error wrapping ErrPublishDeadline when the
// message is past its delivery's Deadline: the moment its source emitted
// it plus relay.ack_deadline, when the source stops waiting for its
// outcome and settles the row (ack_deadline is shorter than the table
// source's lease, relay.inflight_timeout). Call it right before handing
// the message to the NATS client; messages without a delivery or a
// deadline pass.
//
// A relay that was paused (SIGSTOP, a frozen container, a long GC or swap
// stall) with rows still in its pipeline must not publish them when it
// resumes: their lease may have expired, another relay may have published
// them since, and past the stream's duplicate window JetStream would store
// the late copy again, after later rows of its ordering key. The deadline
// is checked on the monotonic clock and on the wall clock, so that a
// suspended machine, whose monotonic clock may have stood still, is caught
// too.
func CheckDeadline(msg *message.Message) error {
	d := Of(msg)
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
