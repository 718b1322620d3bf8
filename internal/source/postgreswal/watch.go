package postgreswal

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
)

// watched is an emitted message awaiting its outcome.
type watched struct {
	e       *entry
	msg     *message.Message
	turn    *sink.Turn
	emitted time.Time
	done    bool
}

// sweepInterval is how often watch looks past the oldest message of its
// batch, and checks that message's ack deadline.
const sweepInterval = 20 * time.Millisecond

// watch reports the outcomes of one emitted batch to the pipeline as the
// messages are acked or nacked, or pass the ack deadline, or a drain gives
// up on them. Like the table source's watch: one goroutine per batch,
// waiting on the oldest message (PubAcks come back mostly in order) and
// sweeping the others every sweepInterval.
//
// A nack passes the message's turn as not sent (a no-op when the publisher
// passed it already), so a message that never reached the NATS client
// does not hold up the ones after it: they are refused, not sent out of
// order. A message past its ack deadline may still be on its way to the
// publisher (a starved handler goroutine): its turn is left to whoever
// learns its fate (the publisher, or its ack or nack later).
func (s *Subscriber) watch(batch []watched) {
	tick := time.NewTicker(sweepInterval)
	defer tick.Stop()
	for next := 0; next < len(batch); next++ {
		w := &batch[next]
		for !w.done {
			select {
			case <-w.msg.Acked():
				s.report(w)
			case <-w.msg.Nacked():
				s.report(w)
			case <-s.drainExpired:
				for i := next; i < len(batch); i++ {
					if !batch[i].done && !s.report(&batch[i]) {
						batch[i].turn.Pass(false)
						s.send(&batch[i], outcome{released: true})
					}
				}
				return
			case now := <-tick.C:
				if now.Sub(w.emitted) >= s.cfg.AckDeadline {
					if source.Of(w.msg).TakeUnsent() {
						// Still waiting its turn in the forwarder: it is
						// not sent now (Handover refuses it), nor are the
						// ones after it (its turn passes as not sent).
						w.turn.Pass(false)
						s.send(w, outcome{unsent: true})
					} else {
						go passWhenSettled(w.msg, w.turn)
						s.send(w, outcome{expired: true})
					}
				}
				for i := next + 1; i < len(batch); i++ {
					if !batch[i].done {
						s.report(&batch[i])
					}
				}
			}
		}
	}
}

// report sends w's outcome if its message was acked or nacked, and says
// whether it was.
func (s *Subscriber) report(w *watched) bool {
	select {
	case <-w.msg.Acked():
		w.turn.Pass(true)
		s.send(w, outcome{acked: true})
	case <-w.msg.Nacked():
		w.turn.Pass(false)
		s.send(w, outcome{})
	default:
		return false
	}
	return true
}

func (s *Subscriber) send(w *watched, o outcome) {
	w.done = true
	o.e, o.msg = w.e, w.msg
	s.outcomes <- o
}

// passWhenSettled passes turn once msg is acked or nacked: every message
// the router took is, eventually.
func passWhenSettled(msg *message.Message, turn *sink.Turn) {
	select {
	case <-msg.Acked():
		turn.Pass(true)
	case <-msg.Nacked():
		turn.Pass(false)
	}
}
