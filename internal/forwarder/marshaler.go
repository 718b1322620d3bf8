package forwarder

import (
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
)

// rowMarshaler builds the NATS message of an outbox row (docs/DESIGN.md, "The
// message made from a row"): data = payload unchanged; the row's own
// headers; then Nats-Msg-Id and the Outbox-* headers, which a row cannot
// set (the subscriber dead-letters rows that try).
type rowMarshaler struct{}

var _ sink.Marshaler = rowMarshaler{}

// Marshal runs in the publisher's writer goroutine right before the
// message goes to the NATS client, the last point where the relay can
// still decide not to send it: a message past its publish deadline
// (source.CheckDeadline) is refused here.
func (rowMarshaler) Marshal(subject string, msg *message.Message) (*nats.Msg, error) {
	if err := source.CheckDeadline(msg); err != nil {
		return nil, err
	}
	user, err := outbox.UserHeaders(msg)
	if err != nil {
		return nil, err
	}
	m := &nats.Msg{Subject: subject, Data: msg.Payload, Header: make(nats.Header, len(user)+len(outbox.RelayHeaders))}
	for name, values := range user {
		// Assigned as written, not canonicalised: consumers see the row's
		// header names byte for byte.
		m.Header[name] = values
	}
	for _, name := range outbox.RelayHeaders {
		m.Header.Set(name, msg.Metadata.Get(name))
	}
	return m, nil
}
