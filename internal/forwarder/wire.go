package forwarder

import (
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/wire"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/sink"
)

// ProviderSet builds the row marshaler the forwarder's publisher needs.
var ProviderSet = wire.NewSet(NewPublisherMarshaler)

// Provide builds the router over sub, a source of the bridge table named
// table, closing within shutdown_timeout. Failures while nc is
// disconnected do not count as attempts. The guard learns every stream a
// PubAck names and holds back the rows of unsafe streams; the keeper
// creates a lost ensured stream again.
func Provide(sub message.Subscriber, table string, pub *sink.Publisher, nc *nats.Conn, guard *dedup.Guard, keeper *broker.Keeper, tracer trace.Tracer, reg *prometheus.Registry, cfg *config.Config, logger *slog.Logger) (*Forwarder, error) {
	return New(sub, table, pub, logger, Config{CloseTimeout: cfg.ShutdownTimeout, Connected: nc.IsConnected,
		StreamSeen: func(subject, stream string) { guard.Published(subject, stream); keeper.Published(subject, stream) },
		Admit:      guard.Admit, StreamMissing: keeper.Missing, Diagnose: keeper.Diagnose, Tracer: tracer, Registerer: reg})
}
