//go:build wireinject

package table

import (
	"context"

	"github.com/google/wire"
	"go.opentelemetry.io/otel/trace"

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

// buildMember assembles one table of a group over store, sharing what the
// relay built, the group's tracer, its budget and its prober.
func buildMember(ctx context.Context, d source.Deps, store *outbox.Store, tracer trace.Tracer, shared groupShared) (*memberParts, func(), error) {
	wire.Build(
		wire.FieldsOf(new(source.Deps), "Config", "Logger", "Conn", "JetStream", "Denials", "Pinger", "Keeper", "Routes"),
		provideMemberSubscriber,
		ProvideStallWatch,
		outbox.ProvideTableCollector,
		source.ProvideReconciler,
		source.ProvidePayloadLimit,
		wire.Bind(new(source.Reconciler), new(*dedup.Reconciler)),
		claimGate,
		wire.Struct(new(memberParts), "*"),
	)
	return nil, nil, nil
}

// buildGroup assembles the table source over several tables.
func buildGroup(ctx context.Context, d source.Deps, tables groupTables) (*GroupSource, func(), error) {
	wire.Build(
		wire.FieldsOf(new(source.Deps), "Config", "Logger", "DB", "Conn", "JetStream", "Denials", "Pinger", "Keeper", "Guard", "Registry"),
		provideGroup,
		ProvideGroupForwarder,
		sink.ProviderSet,
		forwarder.ProviderSet,
		telemetry.ProviderSet,
		wire.Struct(new(GroupSource), "*"),
	)
	return nil, nil, nil
}
