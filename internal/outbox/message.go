package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outbox-bridge/bridge/internal/dedup"
)

// Metadata keys of the messages a Subscriber emits. The keys that name NATS
// headers (Nats-Msg-Id, Outbox-*) are set on every message; the others
// starting with "_outbox_" carry the rest of the row and, once the handler
// is done, its result.
const (
	metaSubject   = "_outbox_subject"
	metaHeaders   = "_outbox_headers"
	metaStream    = "_outbox_stream"
	metaSeq       = "_outbox_stream_seq"
	metaDuplicate = "_outbox_duplicate"
	metaError     = "_outbox_error"
	metaClass     = "_outbox_class"
)

// FailureClass says what a failed publish means for its row.
type FailureClass string

// The failure classes.
const (
	// Retryable failures are retried after a backoff until max_attempts.
	Retryable FailureClass = "retryable"
	// Permanent failures make the row a dead letter at once.
	Permanent FailureClass = "permanent"
	// Unavailable failures happened because NATS was not connected: the row
	// is retried at once when the connection is back, and the attempt does
	// not count towards max_attempts.
	Unavailable FailureClass = "unavailable"
	// Held failures happened because the row's destination refuses it for
	// now, not because of the row: a stream the duplicate-window guard
	// finds unsafe. The row becomes failed with the reason as last_error,
	// the attempt does not count, and it is tried again after
	// SubscriberConfig.HoldBack.
	Held FailureClass = "held"
)

// NewMessage turns a row into the Watermill message a source emits for it
// (DESIGN.md, "NATS message produced from a row"): the UUID and the
// Nats-Msg-Id header are dedup.MsgID(namespace, row.IdempotencyKey); the
// Outbox-* headers come from the row (Outbox-Attempt is row.Attempt); the
// subject and headers, already validated by the caller (CheckSubject,
// ParseHeaders), travel in metadata for the forwarder and its marshaler.
// Every source of the bridge table builds its messages here, so that the
// same row gives the same message whichever source reads it.
func NewMessage(row Row, headers map[string][]string, namespace string) (*message.Message, error) {
	msgID := dedup.MsgID(namespace, row.IdempotencyKey)
	msg := message.NewMessage(msgID, row.Payload)
	msg.Metadata = make(message.Metadata, 8) // the entries below, without growing
	msg.Metadata.Set(metaSubject, row.Subject)
	msg.Metadata.Set(HeaderMsgID, msgID)
	msg.Metadata.Set(HeaderID, strconv.FormatInt(row.ID, 10))
	msg.Metadata.Set(HeaderIdempotencyKey, row.IdempotencyKey)
	msg.Metadata.Set(HeaderCreatedAt, row.CreatedAt.UTC().Format(time.RFC3339Nano))
	msg.Metadata.Set(HeaderAttempt, strconv.Itoa(row.Attempt))
	if len(headers) > 0 {
		encoded, err := json.Marshal(headers)
		if err != nil {
			return nil, err
		}
		msg.Metadata.Set(metaHeaders, string(encoded))
	}
	return msg, nil
}

// Subject is the NATS subject of a message emitted by a Subscriber.
func Subject(msg *message.Message) string { return msg.Metadata.Get(metaSubject) }

// RelayHeaders are the headers the relay sets on every message, in this
// order: Nats-Msg-Id, Outbox-Id, Outbox-Idempotency-Key, Outbox-Created-At
// (RFC 3339, UTC), Outbox-Attempt.
var RelayHeaders = reservedHeaders

// UserHeaders returns the row's own headers of a message emitted by a
// Subscriber (validated at claim time), or nil.
func UserHeaders(msg *message.Message) (map[string][]string, error) {
	raw := msg.Metadata.Get(metaHeaders)
	if raw == "" {
		return nil, nil
	}
	var h map[string][]string
	if err := json.Unmarshal([]byte(raw), &h); err != nil {
		return nil, errors.New("outbox message headers metadata is corrupt")
	}
	return h, nil
}

// SetPublished records the PubAck of msg; the Subscriber stores it when msg
// is acked.
func SetPublished(msg *message.Message, stream string, seq uint64, duplicate bool) {
	msg.Metadata.Set(metaStream, stream)
	msg.Metadata.Set(metaSeq, strconv.FormatUint(seq, 10))
	msg.Metadata.Set(metaDuplicate, strconv.FormatBool(duplicate))
}

// SetFailed records why msg failed and its class; the Subscriber stores it
// when msg is nacked. A nack without it counts as Retryable.
func SetFailed(msg *message.Message, err error, class FailureClass) {
	msg.Metadata.Set(metaError, err.Error())
	msg.Metadata.Set(metaClass, string(class))
}

// Published returns the PubAck recorded on an acked message by
// SetPublished: the stream, its sequence (the original's for a duplicate)
// and whether JetStream reported a duplicate.
func Published(msg *message.Message) (stream string, seq uint64, duplicate bool) {
	seq, _ = strconv.ParseUint(msg.Metadata.Get(metaSeq), 10, 64)
	return msg.Metadata.Get(metaStream), seq, msg.Metadata.Get(metaDuplicate) == "true"
}

// FailureOf returns why a nacked message failed and its class, as recorded
// by SetFailed; a nack without them is a Retryable failure with a reason
// that says so.
func FailureOf(msg *message.Message) (reason string, class FailureClass) {
	reason = msg.Metadata.Get(metaError)
	if reason == "" {
		reason = "handler nacked the message without a reason"
	}
	class = FailureClass(msg.Metadata.Get(metaClass))
	if class == "" {
		class = Retryable
	}
	return reason, class
}

// ErrPublishDeadline is returned (wrapped) by CheckPublishDeadline for a
// message emitted longer than relay.ack_deadline ago.
var ErrPublishDeadline = errors.New("not published: the message is older than the ack deadline")

type publishDeadlineKey struct{}

// WithPublishDeadline records in ctx the last moment the row's message may
// be handed to the NATS client (see CheckPublishDeadline): a source sets it
// to the moment it emits the message plus relay.ack_deadline, when it
// stops waiting for the outcome.
func WithPublishDeadline(ctx context.Context, deadline time.Time) context.Context {
	return context.WithValue(ctx, publishDeadlineKey{}, deadline)
}

// CheckPublishDeadline returns an error wrapping ErrPublishDeadline when
// the message of a claimed row is past its publish deadline: the moment
// the Subscriber emitted it plus relay.ack_deadline, when the Subscriber
// stops waiting for its outcome and settles the row (ack_deadline is
// shorter than the lease, relay.inflight_timeout). Call it right before
// handing the message to the NATS client.
//
// A relay that was paused (SIGSTOP, a frozen container, a long GC or swap
// stall) with claimed rows still in its pipeline must not publish them
// when it resumes: their lease may have expired, another relay may have
// published them since, and past the stream's duplicate window JetStream
// would store the late copy again, after later rows of its ordering key.
// The deadline is checked on the monotonic clock and on the wall clock, so
// that a suspended machine, whose monotonic clock may have stood still, is
// caught too. Messages not emitted by a Subscriber pass.
func CheckPublishDeadline(msg *message.Message) error {
	deadline, ok := msg.Context().Value(publishDeadlineKey{}).(time.Time)
	if !ok {
		return nil
	}
	now := time.Now()
	late := max(now.Sub(deadline), now.Round(0).Sub(deadline.Round(0)))
	if late <= 0 {
		return nil
	}
	return fmt.Errorf("%w (%s late): the relay was paused or stalled, and another relay may have published the row since", ErrPublishDeadline, late.Round(time.Millisecond))
}
