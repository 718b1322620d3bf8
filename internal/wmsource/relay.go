package wmsource

import (
	"context"
	"log/slog"

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
	Health    *health.Server
	DB        *outbox.DB
	Streams   broker.Streams
	Config    *config.Config
	Logger    *slog.Logger
}

// Run relays until ctx ends, then stops: /readyz turns 503 at once, the
// subscriber commits the offset of the messages published, and Run returns
// nil. The duplicate-window guard stops the relay (with its error) when it
// finds an unsafe stream in refuse mode.
func (r *Relay) Run(ctx context.Context) error {
	streams := r.Streams.Names()
	topic := r.Config.Watermill.ForwarderTopic
	r.Logger.Info("relay running",
		slog.String("source", config.SourceWatermillForwarder), slog.String("database", r.DB.Redacted),
		slog.String("table", MessagesTable(topic)), slog.String("offsets_table", OffsetsTable(topic)),
		slog.String("consumer_group", ConsumerGroup), slog.Any("streams", streams), slog.String("http", r.Health.Addr()))
	daemon.LogStreams(r.Logger, streams)
	return daemon.Run(ctx, r.Health, r.Guard, r.Logger, r.Forwarder.Run)
}
