//go:build wireinject

package bridge

import (
	"context"
	"log/slog"

	"github.com/google/wire"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// NewRelay builds the daemon of `bridge run` for the configured source,
// which reports its probes through hs: the database, the source's first
// half (openSource: its table checked before NATS is reached), the NATS
// connection, streams, guard and keeper, then the source over them. The
// cleanup stops what the source built (the tracer of the bridge table's
// sources), closes the NATS connection, stops the embedded server and
// closes the database; call it after Run returned.
func NewRelay(ctx context.Context, cfg *config.Config, logger *slog.Logger, hs *health.Server) (*Relay, func(), error) {
	wire.Build(
		provideDB,
		openSource,
		broker.ProviderSet,
		dedup.ProvideGuard,
		dedup.NewRoutes,
		provideRegistry,
		wire.Struct(new(source.Deps), "*"),
		buildSource,
		provideHealth,
		wire.Struct(new(Relay), "*"),
	)
	return nil, nil, nil
}

// NewDB opens the configured outbox database (for `bridge migrate`).
func NewDB(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*outbox.DB, func(), error) {
	wire.Build(provideDB)
	return nil, nil, nil
}

// NewStore opens the configured outbox table for enqueue, migrating the
// embedded default as `bridge run` does; a *config.Error with source:
// watermill-forwarder.
func NewStore(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*outbox.Store, func(), error) {
	wire.Build(provideDB, provideTableStore)
	return nil, nil, nil
}

// NewJetStream connects to what `bridge run` publishes to (for tail).
func NewJetStream(ctx context.Context, cfg *config.Config, logger *slog.Logger) (jetstream.JetStream, func(), error) {
	wire.Build(broker.ProvideClientConn, broker.ProvideJetStream)
	return nil, nil, nil
}
