package forwarder

import (
	"log/slog"

	"github.com/google/wire"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
)

// ProviderSet builds the forwarder and the row marshaler it needs.
var ProviderSet = wire.NewSet(ProvideForwarder, NewPublisherMarshaler)

// ProvideForwarder builds the router, closing within shutdown_timeout.
func ProvideForwarder(sub *outbox.Subscriber, store *outbox.Store, pub *sink.Publisher, cfg *config.Config, logger *slog.Logger) (*Forwarder, error) {
	return New(sub, store.Table(), pub, logger, Config{CloseTimeout: cfg.ShutdownTimeout})
}
