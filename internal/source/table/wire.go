package table

import (
	"context"
	"log/slog"
	"strings"
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
	c := subscriberConfig(cfg, gate, limit, tracer, reconciler)
	c.Namespace = cfg.NamespaceFor(store.Table())
	return NewSubscriber(store, logger, c)
}

// groupShared is what the tables of a group share: the in-flight budget,
// the prober (nil where the database has no claim probe: SQLite) and what
// to call when a table turns out missing (SubscriberConfig).
type groupShared struct {
	budget  *Budget
	prober  *Prober
	missing func()
}

// provideMemberSubscriber is ProvideSubscriber for one table of a group,
// sharing budget with the others.
func provideMemberSubscriber(store *outbox.Store, cfg *config.Config, logger *slog.Logger, gate ClaimGate, limit outbox.PayloadLimit, tracer trace.Tracer, reconciler source.Reconciler, shared groupShared) (*Subscriber, error) {
	c := subscriberConfig(cfg, gate, limit, tracer, reconciler)
	c.Namespace = cfg.NamespaceFor(store.Table())
	c.Budget, c.Prober, c.OnMissingTable = shared.budget, shared.prober, shared.missing
	return NewSubscriber(store, logger, c)
}

func subscriberConfig(cfg *config.Config, gate ClaimGate, limit outbox.PayloadLimit, tracer trace.Tracer, reconciler source.Reconciler) SubscriberConfig {
	r := cfg.Relay
	return SubscriberConfig{
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
		DrainTimeout:     max(cfg.ShutdownTimeout-3*time.Second, cfg.ShutdownTimeout/2),
		CanClaim:         gate,
		Tracer:           tracer,
		Reconciler:       reconciler,
	}
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

// provideGroup builds the group over the tables opened at start: each
// table's parts from d (buildMember), one budget of relay.max_in_flight
// and max_in_flight_bytes, the tables' metrics in d's registry.
func provideGroup(ctx context.Context, d source.Deps, tables groupTables, tracer trace.Tracer) *Group {
	cfg := d.Config
	shared := groupShared{budget: NewBudget(cfg.Relay.MaxInFlight, int64(cfg.Relay.MaxInFlightBytes))}
	if d.DB.Capabilities().ProbeBeforeClaim {
		shared.prober = NewProber(d.DB, cfg.Relay.PollInterval, d.Logger.With(slog.String("component", "outbox")))
	}
	var g *Group
	g = NewGroup(d.DB, tables.stores, tables.unopened, d.Logger, GroupConfig{
		Names: cfg.Database.Tables, Refresh: cfg.Database.TablesRefresh, Budget: shared.budget, Prober: shared.prober, Registerer: d.Registry,
		Build: func(ctx context.Context, store *outbox.Store) (*memberParts, func(), error) {
			s := shared
			s.missing = g.kick
			return buildMember(ctx, d, store, tracer, s)
		},
	})
	return g
}

// ProvideGroupForwarder builds the router over the group (forwarder.Provide).
func ProvideGroupForwarder(g *Group, pub *sink.Publisher, nc *nats.Conn, guard *dedup.Guard, keeper *broker.Keeper, tracer trace.Tracer, reg *prometheus.Registry, cfg *config.Config, logger *slog.Logger) (*forwarder.Forwarder, error) {
	return forwarder.Provide(g, strings.Join(cfg.Database.Tables, ","), pub, nc, guard, keeper, tracer, reg, cfg, logger)
}
