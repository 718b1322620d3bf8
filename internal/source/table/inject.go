//go:build wireinject

package table

import (
	"context"

	"github.com/google/wire"

	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/telemetry"
)

// build assembles the table source over store from what the relay built.
func build(ctx context.Context, d source.Deps, store *outbox.Store) (*Source, func(), error) {
	wire.Build(
		wire.FieldsOf(new(source.Deps), "Config", "Logger", "Conn", "JetStream", "Denials", "Pinger", "Keeper", "Guard", "Routes", "Registry"),
		ProviderSet,
		outbox.ProvideTableCollector,
		sink.ProviderSet,
		forwarder.ProviderSet,
		source.ProvideReconciler,
		telemetry.ProviderSet,
		source.ProvidePayloadLimit,
		wire.Bind(new(source.Reconciler), new(*dedup.Reconciler)),
		claimGate,
		wire.Struct(new(Source), "*"),
	)
	return nil, nil, nil
}
