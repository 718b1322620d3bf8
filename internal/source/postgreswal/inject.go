//go:build wireinject

package postgreswal

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

// build assembles the postgres-wal source over store from what the relay
// built.
func build(ctx context.Context, d source.Deps, store *outbox.Store) (*Source, func(), error) {
	wire.Build(
		wire.FieldsOf(new(source.Deps), "Config", "Logger", "DB", "Conn", "JetStream", "Denials", "Pinger", "Keeper", "Guard", "Routes", "Registry"),
		ProviderSet,
		sink.ProviderSet,
		forwarder.ProviderSet,
		source.ProvideReconciler,
		telemetry.ProviderSet,
		wire.Bind(new(source.Reconciler), new(*dedup.Reconciler)),
		wire.Struct(new(Source), "*"),
	)
	return nil, nil, nil
}

// buildMember assembles one table of a group over store, on the group's
// stream, sharing what the relay built.
func buildMember(ctx context.Context, d source.Deps, store *outbox.Store, stream *slotStream) (*memberParts, func(), error) {
	wire.Build(
		wire.FieldsOf(new(source.Deps), "Config", "Logger", "Conn", "JetStream", "Keeper", "Routes"),
		provideMemberSubscriber,
		ProvideStallWatch,
		outbox.ProvideTableCollector,
		source.ProvideReconciler,
		wire.Bind(new(source.Reconciler), new(*dedup.Reconciler)),
		wire.Struct(new(memberParts), "*"),
	)
	return nil, nil, nil
}

// buildGroup assembles the postgres-wal source over several tables: one
// slot, one publication, one reader.
func buildGroup(ctx context.Context, d source.Deps, tables groupTables) (*GroupSource, func(), error) {
	wire.Build(
		wire.FieldsOf(new(source.Deps), "Config", "Logger", "DB", "Conn", "JetStream", "Denials", "Pinger", "Keeper", "Guard", "Registry"),
		provideStream,
		provideGroup,
		ProvideGroupForwarder,
		sink.ProviderSet,
		forwarder.ProviderSet,
		telemetry.ProviderSet,
		wire.Struct(new(GroupSource), "*"),
	)
	return nil, nil, nil
}
