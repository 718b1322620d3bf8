//go:build wireinject

package watermillforwarder

import (
	"context"

	"github.com/google/wire"

	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
)

// build assembles the watermill-forwarder source from what the relay
// built.
func build(ctx context.Context, d source.Deps) (*Source, func(), error) {
	wire.Build(
		wire.FieldsOf(new(source.Deps), "Config", "Logger", "DB", "Conn", "JetStream", "Denials", "Pinger", "Keeper", "Guard"),
		ProviderSet,
		sink.ProviderSet,
		source.ProvidePayloadLimit,
		wire.Struct(new(Source), "*"),
	)
	return nil, nil, nil
}
