package watermillforwarder

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/sink"
)

// CloseTimeoutDefault bounds the router's wait for the running handler at
// shutdown.
const CloseTimeoutDefault = forwarder.CloseTimeoutDefault

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
	// Diagnose, when set, tells a failed publish that is the broker's
	// outage (forwarder.Config.Diagnose). Defaults to nil.
	Diagnose func(ctx context.Context, subject string, err error) error
}

// Forwarder relays the envelopes of a Watermill forwarder topic to
// JetStream: the Subscriber over watermill-sql's subscriber, plugged into the
// relay's one forwarder (internal/forwarder), which publishes each
// original message to its destination topic as NATS subject, classifies
// failures and reports their outcome to the Subscriber. Its Counters and
// Collectors are the Subscriber's.
type Forwarder struct {
	*Subscriber
	fwd *forwarder.Forwarder
}

// New builds the relay over sub (a watermill-sql subscriber of cfg.Topic)
// and pub (a sink.Publisher with a Marshaler). Errors: "invalid config:
// <field>: <why>", or the router's.
func New(sub message.Subscriber, pub *sink.Publisher, logger *slog.Logger, cfg Config) (*Forwarder, error) {
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = CloseTimeoutDefault
	}
	switch {
	case sub == nil:
		return nil, fmt.Errorf("%w: sub: must not be nil", config.ErrInvalid)
	case pub == nil:
		return nil, fmt.Errorf("%w: pub: must not be nil", config.ErrInvalid)
	case cfg.Topic == "":
		return nil, fmt.Errorf("%w: Topic: must not be empty", config.ErrInvalid)
	case cfg.CloseTimeout < 0:
		return nil, fmt.Errorf("%w: CloseTimeout: %s: must be positive", config.ErrInvalid, cfg.CloseTimeout)
	}
	logger = logger.With(slog.String("component", "watermill-forwarder"), slog.String("topic", cfg.Topic))
	src := newSubscriber(sub, cfg.MsgIDMetadata, logger)
	fwd, err := forwarder.New(src, cfg.Topic, pub, logger, forwarder.Config{
		CloseTimeout:  cfg.CloseTimeout,
		Connected:     cfg.Connected,
		StreamSeen:    cfg.StreamSeen,
		Admit:         cfg.Admit,
		StreamMissing: cfg.StreamMissing,
		Diagnose:      cfg.Diagnose,
		Stopped:       src.cancel,
	})
	if err != nil {
		return nil, err
	}
	return &Forwarder{Subscriber: src, fwd: fwd}, nil
}

// Run relays until ctx ends. It then closes the router: the subscriber
// stops waiting for the message in hand (its publish is abandoned; it is
// read again by the next run) and commits the offset of the messages acked
// so far; the router waits at most CloseTimeout for the handler.
// Whatever still runs after that is cancelled (its batch rolls back and is
// read again by the next run). Run returns nil after a clean stop, and an
// error when the router stops by itself.
func (f *Forwarder) Run(ctx context.Context) error {
	defer f.cancel()
	return f.fwd.Run(ctx)
}

// Running is closed once the router runs.
func (f *Forwarder) Running() <-chan struct{} { return f.fwd.Running() }
