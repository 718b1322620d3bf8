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
var ProviderSet = wire.NewSet(ProvideGuard, ProvideReconciler, NewRoutes)

// ProvideGuard checks the ensured streams at start (dedup.guard); an unsafe
// one is logged and, in refuse mode, its rows are held back: the relay
// starts. A stream spec of the configuration that is unsafe itself is a
// configuration error, refused before anything is created.
func ProvideGuard(ctx context.Context, js jetstream.JetStream, streams broker.Streams, routes *Routes, cfg *config.Config, logger *slog.Logger) (*Guard, error) {
	names := make([]string, 0, len(streams))
	for _, s := range streams {
		names = append(names, s.Name)
	}
	horizon := cfg.Relay.InflightTimeout + cfg.Relay.PublishTimeout
	g, err := NewGuard(js, GuardMode(cfg.Dedup.Guard), horizon, names, routes, logger.With(slog.String("component", "dedup")))
	if err != nil {
		return nil, err
	}
	g.Check(ctx)
	return g, nil
}

// RelayedStreams returns the stream recorded on a relayed row of a subject;
// see ReconcilerConfig.Relayed.
type RelayedStreams func(ctx context.Context, subject string) (string, error)

// ProvideReconciler bounds stream scans by dedup.reconcile_max_messages and
// dedup.reconcile_timeout; the streams of subjects the JetStream API cannot
// resolve come from routes and relayed; lookups the cluster does not
// answer are the keeper's stream outages.
func ProvideReconciler(js jetstream.JetStream, routes *Routes, relayed RelayedStreams, keeper *broker.Keeper, cfg *config.Config, logger *slog.Logger) *Reconciler {
	return ProvideTableReconciler(js, routes, relayed, keeper, cfg, cfg.Dedup.Namespace, logger)
}

// ProvideTableReconciler is ProvideReconciler for the rows of one outbox
// table, whose ids carry namespace (config.Config.NamespaceFor).
func ProvideTableReconciler(js jetstream.JetStream, routes *Routes, relayed RelayedStreams, keeper *broker.Keeper, cfg *config.Config, namespace string, logger *slog.Logger) *Reconciler {
	return NewReconciler(js, logger.With(slog.String("component", "dedup")), ReconcilerConfig{
		Namespace:      namespace,
		PublishTimeout: cfg.Relay.PublishTimeout,
		Horizon:        cfg.Relay.InflightTimeout + cfg.Relay.PublishTimeout,
		MaxMessages:    cfg.Dedup.ReconcileMaxMessages,
		Timeout:        cfg.Dedup.ReconcileTimeout,
		Routes:         routes,
		Relayed:        relayed,
		Unavailable:    keeper.Diagnose,
	})
}
