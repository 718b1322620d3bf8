package watermillforwarder

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// Source is the relay's half for source: watermill-forwarder: watermill-sql's
// subscriber of the forwarder topic and the forwarder that unwraps its
// envelopes.
type Source struct {
	Forwarder *Forwarder
	DB        *outbox.DB
	Config    *config.Config
}

// Open checks, before the relay connects to NATS, that the database is one
// watermill-sql has a schema for and that the forwarder topic's messages
// and offsets tables exist (CheckTables: outbox.ErrNoTable naming them),
// and returns the constructor of the rest (watermill-sql's subscriber,
// whose batch size depends on the NATS server's max_payload).
func Open(ctx context.Context, db *outbox.DB, cfg *config.Config, _ *slog.Logger) (source.Build, error) {
	if err := CheckTables(ctx, db, cfg.Watermill.ForwarderTopic); err != nil {
		return nil, err
	}
	return source.BuildOf(build), nil
}

// Run relays until ctx ends, then stops: the subscriber commits the offset
// of the messages published.
func (s *Source) Run(ctx context.Context) error { return s.Forwarder.Run(ctx) }

// Describe names the database (redacted), the messages and offsets tables
// and the consumer group.
func (s *Source) Describe() []slog.Attr {
	topic := s.Config.Watermill.ForwarderTopic
	return []slog.Attr{slog.String("database", s.DB.Redacted), slog.String("table", MessagesTable(topic)),
		slog.String("offsets_table", OffsetsTable(topic)), slog.String("consumer_group", ConsumerGroup), s.DB.StatementsAttr()}
}

// Collectors are the forwarder's counters.
func (s *Source) Collectors() []prometheus.Collector { return s.Forwarder.Collectors() }

// Checks: none of its own; watermill-sql's subscriber keeps no state per
// message to tell a stall by.
func (s *Source) Checks() source.Checks { return source.Checks{} }

// Services: none besides the relay's.
func (s *Source) Services() []func(context.Context) { return nil }

// Inherit takes over prev's counters.
func (s *Source) Inherit(prev source.Source) {
	p, ok := prev.(*Source)
	if !ok {
		return
	}
	c, pc := &s.Forwarder.Counters, &p.Forwarder.Counters
	c.Relayed.Add(pc.Relayed.Load())
	c.Deduplicated.Add(pc.Deduplicated.Load())
	c.Failed.Add(pc.Failed.Load())
	c.KeyFallbacks.Add(pc.KeyFallbacks.Load())
	for reason, n := range pc.Skipped {
		if to := c.Skipped[reason]; to != nil {
			to.Add(n.Load())
		}
	}
}
