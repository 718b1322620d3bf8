package source

import (
	"context"
	"runtime"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Coalesce returns sub, a source that emits one message per row, emitting
// its messages in batches instead: the messages sub has ready when one
// arrives, at most max, travel to the forwarder as one message carrying
// their deliveries, in the order sub emitted them. Each of sub's messages
// is acked (published) or nacked (failed) as soon as the forwarder reports
// its delivery, so sub sees what it would see without Coalesce; only the
// router's cost per message — a goroutine, its stack, the middlewares — is
// paid per batch. A message that does not carry exactly one delivery
// travels alone.
//
// A batch is not waited for: it holds what sub emitted while the previous
// batch was being handed on, and Coalesce yields the processor once
// between two messages so that a source emitting as fast as it can
// fills it.
func Coalesce(sub message.Subscriber, max int) message.Subscriber {
	return &coalesced{Subscriber: sub, max: max}
}

type coalesced struct {
	message.Subscriber
	max int
}

func (c *coalesced) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := c.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		var held *message.Message // a message that travels alone, after the batch before it
		for {
			first := held
			held = nil
			if first == nil {
				var ok bool
				if first, ok = <-in; !ok {
					return
				}
			}
			if !single(first) {
				out <- first
				continue
			}
			msgs := []*message.Message{first}
			for yielded := false; len(msgs) < c.max; {
				select {
				case m, ok := <-in:
					if !ok {
						out <- c.batch(msgs)
						return
					}
					if !single(m) {
						held = m
						break
					}
					msgs, yielded = append(msgs, m), false
					continue
				default:
					if !yielded {
						runtime.Gosched()
						yielded = true
						continue
					}
				}
				break
			}
			out <- c.batch(msgs)
		}
	}()
	return out, nil
}

// single reports whether msg carries exactly one delivery.
func single(msg *message.Message) bool {
	b := BatchOf(msg)
	return b != nil && b.Len() == 1
}

// batch returns the message carrying the deliveries of msgs; reporting
// delivery i acks or nacks msgs[i].
func (c *coalesced) batch(msgs []*message.Message) *message.Message {
	if len(msgs) == 1 {
		return msgs[0]
	}
	ds := make([]*Delivery, len(msgs))
	for i, m := range msgs {
		d := Of(m)
		if d.Context == nil {
			d.Context = m.Context()
		}
		ds[i] = d
	}
	b := NewBatch(ds, func(i int) {
		if o, _ := ds[i].Outcome(); o.Published {
			msgs[i].Ack()
		} else {
			msgs[i].Nack()
		}
	})
	msg := message.NewMessage(watermill.NewUUID(), nil)
	msg.SetContext(WithBatch(msgs[0].Context(), b))
	return msg
}
