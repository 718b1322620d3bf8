package outbox

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outbox-bridge/bridge/internal/dedup"
)

// metaHeaders is the metadata key of a message a source emits for a row
// that holds the row's own headers, as JSON; the keys that name NATS
// headers (Nats-Msg-Id, Outbox-*) are set on every message.
const metaHeaders = "_outbox_headers"

// NewMessage turns a row into the Watermill message a source emits for it
// (DESIGN.md, "NATS message produced from a row"): the UUID and the
// Nats-Msg-Id header are dedup.MsgID(namespace, row.IdempotencyKey); the
// Outbox-* headers come from the row (Outbox-Attempt is row.Attempt); the
// headers, already validated by the caller (ParseHeaders), travel in
// metadata for the forwarder's marshaler. The caller checks the subject
// (CheckSubject) and gives it to the forwarder in the message's
// source.Delivery. Every source of the bridge table builds its messages
// here, so that the same row gives the same message whichever source
// reads it.
func NewMessage(row Row, headers map[string][]string, namespace string) (*message.Message, error) {
	msgID := dedup.MsgID(namespace, row.IdempotencyKey)
	msg := message.NewMessage(msgID, row.Payload)
	msg.Metadata = make(message.Metadata, 8) // the entries below, without growing
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
