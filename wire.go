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
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder"
	"github.com/outbox-bridge/bridge/internal/telemetry"
)

// NewRelay builds the daemon of `bridge run`, which reports its probes
// through hs. The cleanup closes the NATS connection, stops the embedded
// server and closes the database; call it after Run returned.
func NewRelay(ctx context.Context, cfg *config.Config, logger *slog.Logger, hs *health.Server) (*Relay, func(), error) {
	wire.Build(
		outbox.ProviderSet,
		broker.ProviderSet,
		sink.ProviderSet,
		forwarder.ProviderSet,
		dedup.ProviderSet,
		telemetry.ProviderSet,
		claimGate,
		payloadLimit,
		reconciler,
		relayedStreams,
		provideRegistry,
		tableChecks,
		provideHealth,
		wire.Struct(new(Relay), "*"),
	)
	return nil, nil, nil
}

// NewWatermillRelay builds the daemon of `bridge run` with source:
// watermill-forwarder: watermill-sql's subscriber of the forwarder topic,
// the JetStream publisher, the guard and the health server. The cleanup
// closes the NATS connection, stops the embedded server and closes the
// database; call it after Run returned.
func NewWatermillRelay(ctx context.Context, cfg *config.Config, logger *slog.Logger, hs *health.Server) (*watermillforwarder.Relay, func(), error) {
	wire.Build(
		outbox.ProvideDB,
		broker.ProviderSet,
		sink.ProviderSet,
		payloadLimit,
		watermillforwarder.ProviderSet,
		dedup.ProviderSet,
		provideWatermillRegistry,
		watermillChecks,
		provideHealth,
		wire.Struct(new(watermillforwarder.Relay), "*"),
	)
	return nil, nil, nil
}

// NewWALRelay builds the daemon of `bridge run` with source: postgres-wal:
// the subscriber over the replication slot, the forwarder and publisher of
// source: table, the guard and the stream keeper; it reports its probes
// through hs. The cleanup closes the NATS connection, stops the embedded
// server and closes the database; call it after Run returned.
func NewWALRelay(ctx context.Context, cfg *config.Config, logger *slog.Logger, hs *health.Server) (*postgreswal.Relay, func(), error) {
	wire.Build(
		outbox.ProvideDB,
		outbox.ProvideStore,
		broker.ProviderSet,
		sink.ProviderSet,
		forwarder.NewPublisherMarshaler,
		postgreswal.ProviderSet,
		dedup.ProviderSet,
		reconciler,
		relayedStreams,
		telemetry.ProviderSet,
		provideWALRegistry,
		provideWALHealth,
		wire.Struct(new(postgreswal.Relay), "*"),
	)
	return nil, nil, nil
}

// NewDB opens the configured outbox database (for `bridge migrate`).
func NewDB(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*outbox.DB, func(), error) {
	wire.Build(outbox.ProvideDB)
	return nil, nil, nil
}

// NewStore opens the configured outbox table (for enqueue and status); a
// *config.Error with source: watermill-forwarder.
func NewStore(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*outbox.Store, func(), error) {
	wire.Build(outbox.ProvideDB, provideTableStore)
	return nil, nil, nil
}

// NewJetStream connects to what `bridge run` publishes to (for tail).
func NewJetStream(ctx context.Context, cfg *config.Config, logger *slog.Logger) (jetstream.JetStream, func(), error) {
	wire.Build(broker.ProvideClientConn, broker.ProvideJetStream)
	return nil, nil, nil
}
