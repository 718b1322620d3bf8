package forwarder

import (
	"log/slog"

	"github.com/google/wire"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
)

// ProviderSet builds the forwarder and the row marshaler it needs.
var ProviderSet = wire.NewSet(ProvideForwarder, NewPublisherMarshaler)

// ProvideForwarder builds the router, closing within shutdown_timeout.
// Failures while nc is disconnected do not count as attempts.
// The guard learns every stream a PubAck names and holds back the rows of
// unsafe streams; the keeper creates a lost ensured stream again.
func ProvideForwarder(sub *outbox.Subscriber, store *outbox.Store, pub *sink.Publisher, nc *nats.Conn, guard *dedup.Guard, keeper *broker.Keeper, tracer trace.Tracer, reg *prometheus.Registry, cfg *config.Config, logger *slog.Logger) (*Forwarder, error) {
	return New(sub, store.Table(), pub, logger, Config{CloseTimeout: cfg.ShutdownTimeout, Connected: nc.IsConnected,
		StreamSeen: func(subject, stream string) { guard.Published(subject, stream); keeper.Published(subject, stream) },
		Admit:      guard.Admit, StreamMissing: keeper.Missing, Diagnose: keeper.Diagnose, Tracer: tracer, Registerer: reg})
}
