package forwarder

import (
	"errors"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"

	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
)

// rowMarshaler returns the NATS message of a row (docs/DESIGN.md, "The
// message made from a row"), built by the source with source.NewDelivery,
// for a Watermill message that carries the row's delivery: the forwarder
// publishes deliveries itself, and asks the marshaler only for messages
// without a NATS message of their own; sink.Publisher.PublishMsg asks it
// for every message.
type rowMarshaler struct{}

var _ sink.Marshaler = rowMarshaler{}

// errNoRow is the error of a message that carries no row's delivery.
var errNoRow = errors.New("message carries no row of the bridge table (no source.Delivery with a NATS message)")

// Marshal runs right before the message goes to the NATS client, the last
// point where the relay can still decide not to send it: a message past
// its publish deadline (source.CheckDeadline) is refused here.
func (rowMarshaler) Marshal(_ string, msg *message.Message) (*nats.Msg, error) {
	d := source.Of(msg)
	if err := d.CheckDeadline(); err != nil {
		return nil, err
	}
	if d == nil || d.Msg == nil {
		return nil, errNoRow
	}
	return d.Msg, nil
}
