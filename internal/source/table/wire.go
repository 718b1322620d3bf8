package table

import (
	"log/slog"
	"time"

	"github.com/google/wire"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
)

// ProviderSet builds the table source's subscriber and its stall watch.
var ProviderSet = wire.NewSet(ProvideSubscriber, ProvideStallWatch, ProvideForwarder)

// ClaimGate is asked before every claim; see SubscriberConfig.CanClaim.
type ClaimGate func() bool

// ProvideSubscriber builds the subscriber from relay.* and dedup.namespace.
// It runs retention (relay.retention) unless relay.delete_on_relay is set.
// It drains for shutdown_timeout less 3 s, leaving the router time to stop.
func ProvideSubscriber(store *outbox.Store, cfg *config.Config, logger *slog.Logger, gate ClaimGate, limit outbox.PayloadLimit, tracer trace.Tracer, reconciler source.Reconciler) (*Subscriber, error) {
	r := cfg.Relay
	return NewSubscriber(store, logger, SubscriberConfig{
		Owner:            r.Owner,
		BatchSize:        r.BatchSize,
		MaxInFlight:      r.MaxInFlight,
		MaxInFlightBytes: int64(r.MaxInFlightBytes),
		MaxPayload:       limit,
		PollInterval:     r.PollInterval,
		InflightTimeout:  r.InflightTimeout,
		AckDeadline:      r.AckDeadline,
		MaxAttempts:      r.MaxAttempts,
		BackoffInitial:   r.BackoffInitial,
		BackoffMax:       r.BackoffMax,
		DeleteOnRelay:    r.DeleteOnRelay,
		Retention:        keptFor(r),
		Namespace:        cfg.Dedup.Namespace,
		DrainTimeout:     max(cfg.ShutdownTimeout-3*time.Second, cfg.ShutdownTimeout/2),
		CanClaim:         gate,
		Tracer:           tracer,
		Reconciler:       reconciler,
	})
}

// ProvideStallWatch watches the subscriber's claims (source.WatchStalls).
func ProvideStallWatch(store *outbox.Store, sub *Subscriber, keeper *broker.Keeper, cfg *config.Config, logger *slog.Logger) *source.StallWatch {
	return source.WatchStalls(tableStall{store: store, sub: sub}, keeper, cfg, logger.With(slog.String("component", "outbox")))
}

// keptFor is relay.retention, or 0 (no retention) when relayed rows are
// deleted at once (relay.delete_on_relay).
func keptFor(r config.Relay) time.Duration {
	if r.DeleteOnRelay {
		return 0
	}
	return r.Retention
}

// ProvideForwarder builds the router over sub (forwarder.Provide).
func ProvideForwarder(sub *Subscriber, store *outbox.Store, pub *sink.Publisher, nc *nats.Conn, guard *dedup.Guard, keeper *broker.Keeper, tracer trace.Tracer, reg *prometheus.Registry, cfg *config.Config, logger *slog.Logger) (*forwarder.Forwarder, error) {
	return forwarder.Provide(sub, store.Table(), pub, nc, guard, keeper, tracer, reg, cfg, logger)
}
