package wmsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/daemon"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
)

// CloseTimeoutDefault bounds the router's wait for the running handler at
// shutdown.
const CloseTimeoutDefault = 25 * time.Second

// fallbackWarnInterval spaces the warnings about messages without the
// configured idempotency-key metadata; the counter counts every one.
const fallbackWarnInterval = time.Minute

// Config configures a Forwarder.
type Config struct {
	// Topic is the forwarder topic the subscriber reads (table
	// watermill_<topic>). Required.
	Topic string
	// MsgIDMetadata names the metadata entry holding the idempotency key;
	// empty means the original message's UUID. A message without a value
	// for it falls back to its UUID (counted, and logged at most once a
	// minute). Defaults to "".
	MsgIDMetadata string
	// CloseTimeout bounds how long Run waits, after its context ends, for
	// the handler to finish and the subscriber to commit; then the
	// subscription is cancelled (its transaction rolls back). Defaults to
	// 25s.
	CloseTimeout time.Duration
	// Connected reports whether the NATS connection is up; a retryable
	// failure while it is down is logged as class "unavailable". Defaults
	// to nil.
	Connected func() bool
	// StreamSeen, when set, is told the subject and the stream of every
	// PubAck (the duplicate-window guard watches those streams). Defaults to
	// nil.
	StreamSeen func(subject, stream string)
	// Admit, when set, is asked before every publish; an error stops that
	// publish and the message is sent again later, as after a retryable
	// failure: the queue waits (the duplicate-window guard refusing an
	// unsafe stream). Defaults to nil.
	Admit func(ctx context.Context, subject string) error
	// StreamMissing, when set, is told the subject of every publish that
	// found no stream. Defaults to nil.
	StreamMissing func(ctx context.Context, subject string)
}

// Counters are running totals of a Forwarder, safe to read at any time.
type Counters struct {
	Relayed      atomic.Int64 // messages acked after their PubAck
	Deduplicated atomic.Int64 // of those, PubAcks with Duplicate set
	Failed       atomic.Int64 // retryable publish failures: nacked, sent again
	KeyFallbacks atomic.Int64 // messages keyed by UUID for want of MsgIDMetadata
	// Skipped counts messages acked without being published, by reason
	// (ReasonEnvelope, ReasonSubject, ReasonMetadata, ReasonRejected).
	Skipped map[string]*atomic.Int64
}

// Forwarder relays the envelopes of a Watermill forwarder topic to
// JetStream: a Watermill router whose one handler takes the messages of
// watermill-sql's subscriber, unwraps each envelope and publishes the
// original message to its destination topic as NATS subject.
//
// A PubAck acks the message (watermill-sql then moves the consumer group's
// offset past it); a retryable failure nacks it (watermill-sql sends it
// again, in order); a message that can never be published (*SkipError) is
// logged at error level, counted and acked.
type Forwarder struct {
	router *message.Router
	sub    message.Subscriber
	pub    *sink.Publisher
	cfg    Config
	logger *slog.Logger

	// Counters are the forwarder's running totals.
	Counters Counters

	// subCtx is the subscription's context: it ends only when a stop goes
	// past CloseTimeout, or after Run returned.
	subCtx    context.Context
	subCancel context.CancelFunc

	lastFallbackWarn atomic.Int64 // unix seconds

	// afterPublish, when set (by tests), is called after each counted
	// PubAck with the new Relayed total.
	afterPublish func(relayed int64)
}

// New builds the router over sub (a watermill-sql subscriber of cfg.Topic)
// and pub (a sink.Publisher with a Marshaler). Errors: "invalid config:
// <field>: <why>", or the router's.
func New(sub message.Subscriber, pub *sink.Publisher, logger *slog.Logger, cfg Config) (*Forwarder, error) {
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = CloseTimeoutDefault
	}
	switch {
	case sub == nil:
		return nil, errors.New("invalid config: sub: must not be nil")
	case pub == nil:
		return nil, errors.New("invalid config: pub: must not be nil")
	case cfg.Topic == "":
		return nil, errors.New("invalid config: Topic: must not be empty")
	case cfg.CloseTimeout < 0:
		return nil, fmt.Errorf("invalid config: CloseTimeout: %s: must be positive", cfg.CloseTimeout)
	}
	logger = logger.With(slog.String("component", "watermill-forwarder"), slog.String("topic", cfg.Topic))
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.CloseTimeout}, daemon.WatermillLogger(logger))
	if err != nil {
		return nil, fmt.Errorf("create router: %w", err)
	}
	subCtx, subCancel := context.WithCancel(context.Background())
	f := &Forwarder{
		router: router, sub: sub, pub: pub, cfg: cfg, logger: logger,
		subCtx: subCtx, subCancel: subCancel,
		Counters: Counters{Skipped: map[string]*atomic.Int64{
			ReasonEnvelope: {}, ReasonSubject: {}, ReasonMetadata: {}, ReasonRejected: {},
		}},
	}
	router.AddMiddleware(middleware.Recoverer)
	router.AddConsumerHandler("watermill_forwarder_to_jetstream", cfg.Topic, detachedSubscriber{sub, subCtx}, f.handle)
	return f, nil
}

// detachedSubscriber subscribes with its own context instead of the
// router's. The router cancels its context as soon as Close begins, racing
// its own Close of the subscriber; watermill-sql would then roll back the
// batch in progress (its transaction is begun with the subscription
// context) although the subscriber, once closed, commits the offset of the
// messages acked so far. Detached, a graceful stop always commits, and
// subCtx still cancels the subscription when a stop takes too long.
type detachedSubscriber struct {
	message.Subscriber
	ctx context.Context
}

var _ message.Subscriber = detachedSubscriber{}

func (s detachedSubscriber) Subscribe(_ context.Context, topic string) (<-chan *message.Message, error) {
	return s.Subscriber.Subscribe(s.ctx, topic)
}

// handle publishes the original message of one envelope.
func (f *Forwarder) handle(msg *message.Message) error {
	u, err := unwrap(msg, f.cfg.MsgIDMetadata)
	if err != nil {
		f.skip(msg, nil, err)
		return nil
	}
	if u.KeyFallback {
		f.fallback(msg, u)
	}
	var ack *jetstream.PubAck
	if f.cfg.Admit != nil {
		if err = f.cfg.Admit(msg.Context(), u.Subject); err != nil {
			// Held back: the queue waits, the guard logs why once.
			msg.Nack()
			f.Counters.Failed.Add(1)
			f.logger.Debug("publish held back", slog.String("subject", u.Subject), slog.Any("error", err))
			return nil
		}
	}
	ack, err = f.pub.PublishMsg(msg.Context(), u.Subject, u.Msg)
	if err != nil {
		err = forwarder.NoStream(u.Subject, err)
		if f.cfg.StreamMissing != nil && errors.Is(err, jetstream.ErrNoStreamResponse) {
			f.cfg.StreamMissing(msg.Context(), u.Subject)
		}
		class := forwarder.Classify(err)
		if class == outbox.Permanent {
			f.skip(msg, u, &SkipError{Reason: ReasonRejected, Err: err})
			return nil
		}
		if class == outbox.Retryable && f.cfg.Connected != nil && !f.cfg.Connected() {
			class = outbox.Unavailable
		}
		// Returning nil after Nack keeps the router from logging the
		// failure a second time; its Ack after a Nack is a no-op.
		msg.Nack()
		if errors.Is(err, context.Canceled) {
			// The subscriber stopped waiting (shutdown): the message is
			// read again by the next run.
			f.logger.Debug("publish abandoned at shutdown", slog.String("uuid", u.Msg.UUID))
			return nil
		}
		f.Counters.Failed.Add(1)
		f.logger.Warn("publish failed; the message is sent again", slog.String("subject", u.Subject),
			slog.String("idempotency_key", u.Msg.UUID), slog.String("class", string(class)), slog.Any("error", err))
		return nil
	}
	if f.cfg.StreamSeen != nil {
		f.cfg.StreamSeen(u.Subject, ack.Stream)
	}
	if ack.Duplicate {
		f.Counters.Deduplicated.Add(1)
	}
	n := f.Counters.Relayed.Add(1)
	if f.afterPublish != nil {
		f.afterPublish(n)
	}
	return nil
}

// skip logs and counts a message that can never be published; the caller
// acks it.
func (f *Forwarder) skip(row *message.Message, u *unwrapped, err error) {
	reason := ReasonEnvelope
	var se *SkipError
	if errors.As(err, &se) {
		reason = se.Reason
	}
	f.Counters.Skipped[reason].Add(1)
	attrs := []any{slog.String("reason", reason), slog.Any("error", err), slog.String("row_uuid", row.UUID)}
	if u != nil {
		attrs = append(attrs, slog.String("subject", u.Subject), slog.String("uuid", u.EnvelopeUUID), slog.String("idempotency_key", u.Msg.UUID))
	}
	f.logger.Error("message cannot be published; acknowledged without publishing (it stays in the table)", attrs...)
}

// fallback counts a message keyed by its UUID for want of MsgIDMetadata
// and warns at most once per fallbackWarnInterval.
func (f *Forwarder) fallback(row *message.Message, u *unwrapped) {
	total := f.Counters.KeyFallbacks.Add(1)
	now := time.Now().Unix()
	last := f.lastFallbackWarn.Load()
	if now-last < int64(fallbackWarnInterval/time.Second) || !f.lastFallbackWarn.CompareAndSwap(last, now) {
		return
	}
	f.logger.Warn("message has no idempotency key in its metadata; its UUID is the key",
		slog.String("metadata", f.cfg.MsgIDMetadata), slog.String("uuid", u.Msg.UUID), slog.String("row_uuid", row.UUID),
		slog.Int64("fallbacks_total", total))
}

// Run relays until ctx ends. It then closes the router: the subscriber
// stops waiting for the message in hand (its publish is abandoned; it is
// read again by the next run) and commits the offset of the messages acked
// so far; the router waits at most CloseTimeout for the handler.
// Whatever still runs after that is cancelled (its batch rolls back and is
// read again by the next run). Run returns nil after a clean stop, and an
// error when the router stops by itself.
func (f *Forwarder) Run(ctx context.Context) error {
	defer f.subCancel()
	return daemon.RunRouter(ctx, f.router, f.pub, f.subCancel, f.logger, "relay stopping: committing the offset of the messages published")
}

// Running is closed once the router runs.
func (f *Forwarder) Running() <-chan struct{} { return f.router.Running() }

// Collectors exposes the counters as Prometheus metrics:
// bridge_watermill_messages_relayed_total,
// bridge_watermill_messages_deduplicated_total,
// bridge_watermill_messages_failed_total{class="retryable"},
// bridge_watermill_messages_skipped_total{reason} and
// bridge_watermill_msg_id_fallbacks_total.
func (f *Forwarder) Collectors() []prometheus.Collector {
	counter := func(name, help string, v func() int64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(v()) })
	}
	c := &f.Counters
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
