package watermillforwarder

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/source"
)

// fallbackWarnInterval spaces the warnings about messages without the
// configured idempotency-key metadata; the counter counts every one.
const fallbackWarnInterval = time.Minute

// Counters are running totals of a Subscriber, safe to read at any time.
type Counters struct {
	Relayed      atomic.Int64 // messages acked after their PubAck
	Deduplicated atomic.Int64 // of those, PubAcks with Duplicate set
	Failed       atomic.Int64 // retryable publish failures: nacked, sent again
	KeyFallbacks atomic.Int64 // messages keyed by UUID for want of MsgIDMetadata
	// Skipped counts messages acked without being published, by reason
	// (ReasonEnvelope, ReasonSubject, ReasonMetadata, ReasonRejected).
	Skipped map[string]*atomic.Int64
}

// Subscriber is the watermill-forwarder source: a message.Subscriber over
// watermill-sql's subscriber of a forwarder topic, for the relay's one
// forwarder (internal/forwarder). It unwraps each envelope watermill-sql
// hands it and emits the original message with a source.Delivery whose
// subject is the envelope's destination topic; watermill-sql waits for
// the envelope's ack, so one message is in flight at a time, in table
// order.
//
// The outcome the forwarder reports settles the envelope: a PubAck acks
// it (watermill-sql then moves the consumer group's offset past it); a
// permanent failure acks it too, skipped (*SkipError, ReasonRejected:
// logged at error level and counted); any other failure nacks it
// (watermill-sql sends it again, in order). An envelope that can never be
// published (*SkipError) is logged, counted and acked without being
// emitted.
type Subscriber struct {
	sub           message.Subscriber
	msgIDMetadata string
	logger        *slog.Logger

	// Counters are the source's running totals.
	Counters Counters
	// Signals are the moments a test can wait for: Settled receives one
	// value after each message's outcome is counted and the message acked
	// or nacked, and after each message skipped (one that can never be
	// published: two values when its publish was refused for good). Set it (source.NewTestSignal) before Subscribe.
	Signals struct{ Settled *source.TestSignal[int] }

	// subCtx is the subscription's context: it ends only when a stop goes
	// past the forwarder's CloseTimeout, or after the relay stopped.
	subCtx    context.Context
	subCancel context.CancelFunc

	lastFallbackWarn atomic.Int64 // unix seconds

	// afterPublish, when set (by tests), is called after each counted
	// PubAck with the new Relayed total.
	afterPublish func(relayed int64)
}

var _ message.Subscriber = (*Subscriber)(nil)

// newSubscriber returns the source over sub, a watermill-sql subscriber of a
// forwarder topic; msgIDMetadata names the metadata entry holding the
// idempotency key ("": the message's UUID).
func newSubscriber(sub message.Subscriber, msgIDMetadata string, logger *slog.Logger) *Subscriber {
	subCtx, subCancel := context.WithCancel(context.Background())
	return &Subscriber{
		sub: sub, msgIDMetadata: msgIDMetadata, logger: logger,
		subCtx: subCtx, subCancel: subCancel,
		Counters: Counters{Skipped: map[string]*atomic.Int64{
			ReasonEnvelope: {}, ReasonSubject: {}, ReasonMetadata: {}, ReasonRejected: {},
		}},
	}
}

// Subscribe subscribes to topic with the source's own context instead of
// the router's. The router cancels its context as soon as Close begins,
// racing its own Close of the subscriber; watermill-sql would then roll
// back the batch in progress (its transaction is begun with the
// subscription context) although the subscriber, once closed, commits the
// offset of the messages acked so far. Detached, a graceful stop always
// commits, and the forwarder's Stopped hook still cancels the subscription
// when a stop takes too long.
func (s *Subscriber) Subscribe(_ context.Context, topic string) (<-chan *message.Message, error) {
	rows, err := s.sub.Subscribe(s.subCtx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for row := range rows {
			s.deliver(row, out)
		}
	}()
	return out, nil
}

// Close closes watermill-sql's subscriber: it stops waiting for the
// message in hand (read again by the next run) and commits the offset of
// the messages acked so far. The messages channel then closes.
func (s *Subscriber) Close() error { return s.sub.Close() }

// cancel cancels the subscription: watermill-sql's batch transaction
// rolls back, and its messages are read again by the next run.
func (s *Subscriber) cancel() { s.subCancel() }

// deliver emits the original message of one envelope and settles the
// envelope from its outcome. It returns early when watermill-sql gives
// the envelope up (closing, or its ack deadline passed): the envelope is
// read again, by this run or the next.
func (s *Subscriber) deliver(row *message.Message, out chan<- *message.Message) {
	u, err := unwrap(row, s.msgIDMetadata)
	if err != nil {
		s.skip(row, nil, err)
		row.Ack()
		return
	}
	if u.KeyFallback {
		s.fallback(row, u)
	}
	u.Msg.SetContext(source.With(row.Context(), &source.Delivery{Subject: u.Subject}))
	given := row.Context().Done()
	select {
	case out <- u.Msg:
	case <-given:
		return
	}
	select {
	case <-u.Msg.Acked():
	case <-u.Msg.Nacked():
	case <-given:
		s.logger.Debug("publish abandoned: watermill-sql gave the message up (stop or ack deadline); it is read again", slog.String("uuid", u.Msg.UUID))
		return
	}
	s.settle(row, u, source.OutcomeOf(u.Msg))
}

// settle acks or nacks row, the envelope of u, by the outcome of u's
// publish.
func (s *Subscriber) settle(row *message.Message, u *unwrapped, out source.Outcome) {
	defer s.Signals.Settled.Signal(1)
	switch {
	case out.Published:
		if out.Duplicate {
			s.Counters.Deduplicated.Add(1)
		}
		n := s.Counters.Relayed.Add(1)
		if s.afterPublish != nil {
			s.afterPublish(n)
		}
		row.Ack()
	case out.Class == source.Permanent:
		s.skip(row, u, &SkipError{Reason: ReasonRejected, Err: out.Err})
		row.Ack()
	case out.Class == source.Held:
		// Held back: the queue waits, the guard logs why once.
		row.Nack()
		s.Counters.Failed.Add(1)
		s.logger.Debug("publish held back", slog.String("subject", u.Subject), slog.String("error", out.Reason()))
	case errors.Is(out.Err, context.Canceled):
		// The subscriber stopped waiting (shutdown): the message is read
		// again by the next run.
		row.Nack()
		s.logger.Debug("publish abandoned at shutdown", slog.String("uuid", u.Msg.UUID))
	default:
		row.Nack()
		s.Counters.Failed.Add(1)
		s.logger.Warn("publish failed; the message is sent again", slog.String("subject", u.Subject),
			slog.String("idempotency_key", u.Msg.UUID), slog.String("class", string(out.Class)), slog.String("error", out.Reason()))
	}
}

// skip logs and counts a message that can never be published; the caller
// acks it.
func (s *Subscriber) skip(row *message.Message, u *unwrapped, err error) {
	defer s.Signals.Settled.Signal(1)
	reason := ReasonEnvelope
	var se *SkipError
	if errors.As(err, &se) {
		reason = se.Reason
	}
	s.Counters.Skipped[reason].Add(1)
	attrs := []any{slog.String("reason", reason), slog.Any("error", err), slog.String("row_uuid", row.UUID)}
	if u != nil {
		attrs = append(attrs, slog.String("subject", u.Subject), slog.String("uuid", u.EnvelopeUUID), slog.String("idempotency_key", u.Msg.UUID))
	}
	s.logger.Error("message cannot be published; acknowledged without publishing (it stays in the table)", attrs...)
}

// fallback counts a message keyed by its UUID for want of MsgIDMetadata
// and warns at most once per fallbackWarnInterval.
func (s *Subscriber) fallback(row *message.Message, u *unwrapped) {
	total := s.Counters.KeyFallbacks.Add(1)
	now := time.Now().Unix()
	last := s.lastFallbackWarn.Load()
	if now-last < int64(fallbackWarnInterval/time.Second) || !s.lastFallbackWarn.CompareAndSwap(last, now) {
		return
	}
	s.logger.Warn("message has no idempotency key in its metadata; its UUID is the key",
		slog.String("metadata", s.msgIDMetadata), slog.String("uuid", u.Msg.UUID), slog.String("row_uuid", row.UUID),
		slog.Int64("fallbacks_total", total))
}

// Collectors exposes the counters as Prometheus metrics:
// bridge_watermill_messages_relayed_total,
// bridge_watermill_messages_deduplicated_total,
// bridge_watermill_messages_failed_total{class="retryable"},
// bridge_watermill_messages_skipped_total{reason} and
// bridge_watermill_msg_id_fallbacks_total.
func (s *Subscriber) Collectors() []prometheus.Collector {
	counter := func(name, help string, v func() int64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(v()) })
	}
	c := &s.Counters
	cs := []prometheus.Collector{
		counter("bridge_watermill_messages_relayed_total", "Watermill forwarder messages acked after their PubAck.", c.Relayed.Load, nil),
		counter("bridge_watermill_messages_deduplicated_total", "Relayed messages whose PubAck said duplicate: JetStream already held their Nats-Msg-Id.", c.Deduplicated.Load, nil),
		counter("bridge_watermill_messages_failed_total", "Failed publish attempts; the message is sent again.", c.Failed.Load, prometheus.Labels{"class": "retryable"}),
		counter("bridge_watermill_msg_id_fallbacks_total", "Messages without the watermill.msg_id_metadata entry, keyed by their UUID.", c.KeyFallbacks.Load, nil),
	}
	for _, reason := range []string{ReasonEnvelope, ReasonSubject, ReasonMetadata, ReasonRejected} {
		cs = append(cs, counter("bridge_watermill_messages_skipped_total",
			"Messages that can never be published, acknowledged without publishing (no dead-letter status in Watermill tables).",
			c.Skipped[reason].Load, prometheus.Labels{"reason": reason}))
	}
	return cs
}
