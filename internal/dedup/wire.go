package dedup

import (
	"context"
	"log/slog"

	"github.com/google/wire"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
)

// ProviderSet builds the duplicate-window guard.
var ProviderSet = wire.NewSet(ProvideGuard, ProvideReconciler)

// ProvideGuard checks the ensured streams at start (dedup.guard); in refuse
// mode an unsafe stream fails start-up with *UnsafeStreamError.
func ProvideGuard(ctx context.Context, js jetstream.JetStream, streams broker.Streams, cfg *config.Config, logger *slog.Logger) (*Guard, error) {
	names := make([]string, 0, len(streams))
	for _, s := range streams {
		names = append(names, s.Name)
	}
	horizon := cfg.Relay.InflightTimeout + cfg.Relay.PublishTimeout
	g, err := NewGuard(js, GuardMode(cfg.Dedup.Guard), horizon, names, logger.With(slog.String("component", "dedup")))
	if err != nil {
		return nil, err
	}
	if err := g.Check(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// ProvideReconciler bounds stream scans by dedup.reconcile_max_messages and
// dedup.reconcile_timeout.
func ProvideReconciler(js jetstream.JetStream, cfg *config.Config, logger *slog.Logger) *Reconciler {
	return NewReconciler(js, logger.With(slog.String("component", "dedup")), ReconcilerConfig{
		Namespace:      cfg.Dedup.Namespace,
		PublishTimeout: cfg.Relay.PublishTimeout,
		MaxMessages:    cfg.Dedup.ReconcileMaxMessages,
		Timeout:        cfg.Dedup.ReconcileTimeout,
	})
}
