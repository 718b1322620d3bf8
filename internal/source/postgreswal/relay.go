package postgreswal

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/daemon"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Relay is the daemon of `bridge run` with source: postgres-wal.
type Relay struct {
	Forwarder  *forwarder.Forwarder
	Subscriber *Subscriber
	Stall      *outbox.StallWatch
	Guard      *dedup.Guard
	Keeper     *broker.Keeper
	Health     *health.Server
	Probes     *health.Probes
	Store      *outbox.Store
	Conn       *nats.Conn
	Streams    broker.Streams
	Config     *config.Config
	Logger     *slog.Logger
}

// Inherit takes over what prev, the relay this process ran before this
// one (rebuilt after its NATS connection was closed for good), observed:
// its stall, when its rows last moved, the guard's findings and the
// keeper's count. So a stall lasts across rebuilds: the stall timer
// measures rows not moving, whatever happens to connections.
func (r *Relay) Inherit(prev *Relay) {
	r.Subscriber.Inherit(prev.Subscriber)
	r.Stall.Inherit(prev.Stall)
	r.Guard.Inherit(prev.Guard)
	r.Keeper.Inherit(prev.Keeper)
}

// Run relays until ctx ends, then drains: reading stops, publishes in
// progress finish, marks are written and the slot's position is
// confirmed. Beside the relay run the duplicate-window guard, the stream
// keeper, the stall watch and retention. It returns nil after a clean stop, and an error
// wrapping daemon.ErrConnectionClosed, after the same drain, when the NATS
// connection was closed for good. A lost replication slot does not stop
// it: the subscriber waits for the slot (readiness says so).
func (r *Relay) Run(ctx context.Context) error {
	streams := r.Streams.Names()
	r.Logger.Info("relay running",
		slog.String("source", config.SourcePostgresWAL), slog.String("outbox", r.Store.DB().Redacted), slog.String("table", r.Store.Table()),
		slog.String("slot", r.Config.WAL.Slot), slog.String("publication", r.Config.WAL.Publication),
		slog.Any("streams", streams), slog.String("http", r.Health.Addr()))
	daemon.LogStreams(r.Logger, streams)
	r.Stall.HeldBy(r.Keeper.Outage)
	services := []func(context.Context){
		func(ctx context.Context) { r.Guard.Run(ctx, dedup.GuardIntervalDefault) },
		func(ctx context.Context) { r.Keeper.Run(ctx, broker.KeeperIntervalDefault) },
		r.Stall.Run,
	}
	if !r.Config.Relay.DeleteOnRelay {
		retention := r.Config.Relay.Retention
		services = append(services, func(ctx context.Context) {
			outbox.RunRetention(ctx, r.Store, retention, r.Logger)
		})
	}
	r.Health.Running(r.Probes)
	return daemon.Run(ctx, r.Conn, r.Logger, r.Forwarder.Run, services...)
}
