//go:build wireinject

package mysqlbinlog

import (
	"context"

	"github.com/google/wire"

	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/telemetry"
)

// build assembles the mysql-binlog source over store from what the relay
// built.
func build(ctx context.Context, d source.Deps, store *outbox.Store) (*Source, func(), error) {
	wire.Build(
		wire.FieldsOf(new(source.Deps), "Config", "Logger", "DB", "Conn", "JetStream", "Denials", "Pinger", "Keeper", "Guard", "Routes", "Registry"),
		ProviderSet,
		sink.ProviderSet,
		forwarder.ProviderSet,
		source.ProvideReconciler,
		telemetry.ProviderSet,
		wire.Struct(new(Source), "*"),
	)
	return nil, nil, nil
}
