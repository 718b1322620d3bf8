package walsource

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outbox-bridge/bridge/internal/sink"
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
// sweeping the others every sweepInterval. Every outcome passes the
// message's turn, so a message that never reached the NATS client does not
// hold up the ones after it.
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
						s.send(&batch[i], outcome{released: true})
					}
				}
				return
			case now := <-tick.C:
				if now.Sub(w.emitted) >= s.cfg.AckDeadline {
					s.send(w, outcome{expired: true})
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
		s.send(w, outcome{acked: true})
	case <-w.msg.Nacked():
		s.send(w, outcome{})
	default:
		return false
	}
	return true
}

func (s *Subscriber) send(w *watched, o outcome) {
	w.done = true
	w.turn.Pass()
	o.e, o.msg = w.e, w.msg
	s.outcomes <- o
}
