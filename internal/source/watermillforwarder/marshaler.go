package watermillforwarder

import (
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
)

// Marshaler builds the NATS message of an unwrapped Watermill message:
// data = payload unchanged; one header per metadata entry, name and value
// as written; Nats-Msg-Id = outbox.MsgID(Namespace, msg.UUID) and
// Outbox-Idempotency-Key = msg.UUID, where msg.UUID is the idempotency key
// chosen by unwrap. Give it to sink.New.
type Marshaler struct {
	// Namespace prefixes every Nats-Msg-Id (dedup.namespace). Defaults to
	// "" (no prefix).
	Namespace string
}

var _ sink.Marshaler = Marshaler{}

// Marshal implements sink.Marshaler. It does not fail: unwrap has checked
// the metadata.
func (m Marshaler) Marshal(subject string, msg *message.Message) (*nats.Msg, error) {
	out := nats.NewMsg(subject)
	out.Data = msg.Payload
	for name, value := range msg.Metadata {
		// Assigned, not Set through a canonical form: consumers see the
		// metadata names byte for byte.
		out.Header[name] = []string{value}
	}
	out.Header[outbox.HeaderMsgID] = []string{outbox.MsgID(m.Namespace, msg.UUID)}
	out.Header[outbox.HeaderIdempotencyKey] = []string{msg.UUID}
	return out, nil
}
