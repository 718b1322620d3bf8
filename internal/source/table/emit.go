package table

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// emit hands the rows of one claim to the router as one message carrying
// a source.Batch, one delivery per row, and starts watching it. A row that
// can never be published is settled at once as a dead letter instead. It
// returns false when stop (the claimer's stop) interrupted it; the rows
// were then released, not emitted.
func (s *Subscriber) emit(rows []outbox.Row, claimed claimWindow, out chan<- *message.Message, stop <-chan struct{}) bool {
	if len(rows) == 0 {
		return true
	}
	// w.rows are the rows kept, filtered in place: the claim's slice is
	// the subscriber's from here on.
	w := &watched{s: s, rows: rows[:0]}
	deliveries := make([]source.Delivery, len(rows))
	msgs := make([]nats.Msg, len(rows))
	ds := make([]*source.Delivery, 0, len(rows))
	for _, row := range rows {
		headers, err := outbox.ParseHeaders(row.Headers)
		if err == nil {
			err = outbox.CheckSubject(row.Subject)
		}
		if err == nil && row.PayloadLeftOut {
			err = fmt.Errorf("%w, the payload was not read", outbox.OverMaxPayload(row.PayloadSize, s.cfg.MaxPayload()))
		}
		if err != nil {
			s.outstanding.Add(1)
			st := settled(row)
			st.err, st.permanent = err.Error(), true
			s.settle(st)
			continue
		}
		d, m := &deliveries[len(ds)], &msgs[len(ds)]
		source.FillDelivery(d, m, row, headers, s.cfg.Namespace)
		if ctx, traced := s.traceClaim(row, headers, claimed); traced {
			d.Context = ctx
		}
		ds = append(ds, d)
		w.rows = append(w.rows, row)
	}
	if len(ds) == 0 {
		return true
	}
	// The rows may not be sent after the moment watch gives up on their
	// outcome: ack_deadline after they are emitted. Not from the claim: a
	// reconcile scan between claim and emit can outlast ack_deadline, and
	// its rows would then never be sent.
	w.emitted = time.Now()
	for _, d := range ds {
		d.Deadline = w.emitted.Add(s.cfg.AckDeadline)
	}
	w.batch = source.NewBatch(ds, w.reported)
	w.msg = message.NewMessage(watermill.NewUUID(), nil)
	w.msg.SetContext(source.WithBatch(s.hardCtx, w.batch))
	if source.Closed(stop) { // select below picks at random when both are ready
		s.release(w.rows)
		return false
	}
	s.outstanding.Add(int64(len(w.rows)))
	select {
	case out <- w.msg:
		go s.watch(w)
		return true
	case <-stop:
		s.outstanding.Add(-int64(len(w.rows)))
		s.release(w.rows)
		return false
	}
}

// watched is an emitted batch awaiting its outcomes.
type watched struct {
	s       *Subscriber
	rows    []outbox.Row // rows[i] is the row of delivery i
	batch   *source.Batch
	msg     *message.Message
	emitted time.Time
}

// reported settles the row of delivery i from the outcome the forwarder
// just reported for it, and lets go of its payload: the rest of its batch
// may be awaited much longer.
func (w *watched) reported(i int) {
	d := w.batch.At(i)
	out, _ := d.Outcome()
	st := settled(w.rows[i])
	if out.Published {
		st.done = true
		st.stream, st.seq, st.duplicate = out.Stream, out.Seq, out.Duplicate
	} else {
		st.err = out.Reason()
		st.permanent, st.refund, st.held = out.Class == source.Permanent, out.Class == source.Unavailable, out.Class == source.Held
		st.holdFor = out.HoldFor
	}
	w.rows[i].Payload, d.Msg.Data = nil, nil
	w.s.settle(st)
}

// watch waits until every row of an emitted batch is settled: the
// forwarder reports each one's outcome (reported settles it), usually
// before it acks the batch's message. The rows whose outcome is not
// reported when the message is acked or nacked (a handler other than the
// forwarder's), when the batch passes the ack deadline, or when a drain
// gives up, are taken over and settled here.
//
// One goroutine and one timer per batch, not per row: a goroutine, a
// timer and a stack growth per message were a tenth of the relay's CPU in
// a bridge-bench profile.
func (s *Subscriber) watch(w *watched) {
	timer := time.NewTimer(time.Until(w.emitted.Add(s.cfg.AckDeadline)))
	defer timer.Stop()
	var rest func(i int) settlement
	var unsent func(i int) settlement // a row never handed to NATS, when it differs from rest
	select {
	case <-w.batch.Done():
		return
	case <-w.msg.Acked():
		rest = func(i int) settlement {
			st := settled(w.rows[i])
			st.done = true // acked without a report: published, where is not known
			return st
		}
	case <-w.msg.Nacked():
		rest = func(i int) settlement {
			st := settled(w.rows[i])
			st.err = source.Outcome{Class: source.Retryable}.Reason()
			return st
		}
	case <-timer.C:
		rest = func(i int) settlement {
			st := settled(w.rows[i])
			st.err = fmt.Sprintf("no ack or nack within ack deadline %s; publish outcome unknown", s.cfg.AckDeadline)
			return st
		}
		// Still waiting its turn in the forwarder (a batch whose hand-over
		// outlasts the deadline): it is not sent now (Handover refuses it),
		// so the attempt is given back, as the forwarder's own
		// past-the-deadline path does.
		unsent = func(i int) settlement {
			st := settled(w.rows[i])
			st.err = fmt.Sprintf("%v: still waiting its hand-over to NATS at ack deadline %s; not sent, attempt not counted", source.ErrPublishDeadline, s.cfg.AckDeadline)
			st.refund = true
			return st
		}
	case <-s.drainExpired:
		rest = func(i int) settlement {
			st := settled(w.rows[i])
			st.err, st.refund = "released at shutdown before the publish outcome was known", true
			return st
		}
	}
	for i := range w.batch.Len() {
		if ok, wasSent := w.batch.At(i).Take(); ok {
			st := rest(i)
			if !wasSent && unsent != nil {
				st = unsent(i)
			}
			w.rows[i].Payload = nil
			s.settle(st)
		}
	}
}
