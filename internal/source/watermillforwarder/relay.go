package watermillforwarder

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/daemon"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Relay is the daemon of `bridge run` with source: watermill-forwarder.
type Relay struct {
	Forwarder *Forwarder
	Guard     *dedup.Guard
	Keeper    *broker.Keeper
	Health    *health.Server
	Probes    *health.Probes
	DB        *outbox.DB
	Conn      *nats.Conn
	Streams   broker.Streams
	Config    *config.Config
	Logger    *slog.Logger
}

// Inherit takes over what prev, the relay this process ran before this one
// (its NATS connection was closed for good), observed: the forwarder's
// counters, the guard's findings and the keeper's count. Call it before
// Run.
func (r *Relay) Inherit(prev *Relay) {
	c, p := &r.Forwarder.Counters, &prev.Forwarder.Counters
	c.Relayed.Add(p.Relayed.Load())
	c.Deduplicated.Add(p.Deduplicated.Load())
	c.Failed.Add(p.Failed.Load())
	c.KeyFallbacks.Add(p.KeyFallbacks.Load())
	for reason, n := range p.Skipped {
		if to := c.Skipped[reason]; to != nil {
			to.Add(n.Load())
		}
	}
	r.Guard.Inherit(prev.Guard)
	r.Keeper.Inherit(prev.Keeper)
}

// Run relays until ctx ends, then stops: the subscriber commits the offset
// of the messages published, and Run returns nil. Beside it the
// duplicate-window guard and the stream keeper run. When the NATS
// connection is closed for good Run stops the same way and returns an
// error wrapping daemon.ErrConnectionClosed.
func (r *Relay) Run(ctx context.Context) error {
	streams := r.Streams.Names()
	topic := r.Config.Watermill.ForwarderTopic
	r.Logger.Info("relay running",
		slog.String("source", config.SourceWatermillForwarder), slog.String("database", r.DB.Redacted),
		slog.String("table", MessagesTable(topic)), slog.String("offsets_table", OffsetsTable(topic)),
		slog.String("consumer_group", ConsumerGroup), slog.Any("streams", streams), slog.String("http", r.Health.Addr()))
	daemon.LogStreams(r.Logger, streams)
	r.Health.Running(r.Probes)
	return daemon.Run(ctx, r.Conn, r.Logger, r.Forwarder.Run,
		func(ctx context.Context) { r.Guard.Run(ctx, dedup.GuardIntervalDefault) },
		func(ctx context.Context) { r.Keeper.Run(ctx, broker.KeeperIntervalDefault) })
}
