package source

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// FailureClass says what a failed publish means for its row.
type FailureClass string

// The failure classes.
const (
	// Retryable failures are retried after a backoff until the source's
	// max_attempts.
	Retryable FailureClass = "retryable"
	// Permanent failures can never succeed: the row becomes a dead letter
	// at once (a watermill-forwarder message is skipped).
	Permanent FailureClass = "permanent"
	// Unavailable failures are not the row's: NATS was not connected, or
	// the message was never sent. The row is retried as soon as the relay
	// can publish, and the attempt does not count.
	Unavailable FailureClass = "unavailable"
	// Held failures happened because the row's destination refuses it for
	// now, not because of the row: a stream the duplicate-window guard
	// finds unsafe. The attempt does not count; the row is tried again
	// after the source's hold-back time.
	Held FailureClass = "held"
)

// Outcome is what became of one delivery: published, with the PubAck's
// stream and sequence, or failed, with its class and error.
type Outcome struct {
	// Published reports a PubAck.
	Published bool
	// Stream and Seq say where the PubAck stored the message; for a
	// duplicate, Seq is the original's sequence (0 on an Interest stream).
	Stream string
	Seq    uint64
	// Duplicate reports that the stream already held the Nats-Msg-Id.
	Duplicate bool
	// Class says what a failure means for the row; empty when Published.
	Class FailureClass
	// Err is why it failed; nil when Published.
	Err error
	// HoldFor is how long a Held row waits before it is tried again; 0
	// means the source's own hold-back time.
	HoldFor time.Duration
	// Own reports a failure that the server's own answer ties to this
	// row: no stream captures its subject (the server said so), its
	// stream refused it (a JetStream API error in the PubAck that is not
	// an outage), or the duplicate-window guard found its stream unsafe.
	// A failure without such an answer (a timeout, a 503 no responders
	// alone, a disconnect, a stream without a leader) is not, whatever its
	// Class: it may be the whole destination's.
	Own bool
}

// Published is the outcome of a PubAck.
func Published(stream string, seq uint64, duplicate bool) Outcome {
	return Outcome{Published: true, Stream: stream, Seq: seq, Duplicate: duplicate}
}

// Failed is the outcome of a failed publish of class class.
func Failed(err error, class FailureClass) Outcome {
	return Outcome{Class: class, Err: err}
}

// noReason is the reason of a message nacked without a reported outcome.
const noReason = "handler nacked the message without a reason"

// Reason is why the delivery failed, in words: Err's text, or a text
// that says there was none. Empty when Published.
func (o Outcome) Reason() string {
	switch {
	case o.Published:
		return ""
	case o.Err == nil:
		return noReason
	}
	return o.Err.Error()
}

// OutcomeOf returns the outcome reported on the delivery msg carries;
// call it once msg was acked or nacked. A message acked without a report
// is published, its stream unknown; one nacked without a report (or
// carrying no delivery) is a Retryable failure whose Reason says so.
func OutcomeOf(msg *message.Message) Outcome {
	if d := Of(msg); d != nil {
		if o, ok := d.Outcome(); ok {
			return o
		}
	}
	select {
	case <-msg.Acked():
		return Outcome{Published: true}
	default:
		return Outcome{Class: Retryable}
	}
}
