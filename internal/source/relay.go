package source

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Source is what one `source:` value brings to the relay of `bridge run`
// (the bridge package's Relay): the Watermill router over its subscriber
// and the JetStream publisher, and what the relay around it reports and
// runs. The relay adds what every source shares: the database, NATS and
// streams probes, the duplicate-window guard, the stream keeper, one
// Prometheus registry and one NATS connection.
type Source interface {
	// Run relays until ctx ends, then drains (forwarder.Forwarder.Run).
	Run(ctx context.Context) error
	// Describe returns what the "relay running" log line says of the
	// source: its tables, slot, publication.
	Describe() []slog.Attr
	// Collectors are the source's metrics, registered in the relay's
	// registry.
	Collectors() []prometheus.Collector
	// Checks are the source's own probes: readiness besides the database,
	// NATS, the streams and the guard; liveness besides the process being
	// up.
	Checks() Checks
	// Services run beside Run until ctx ends (the stall watch, the LISTEN
	// session, retention).
	Services() []func(context.Context)
	// Inherit takes over what prev, the source of the relay this process
	// ran before this one (rebuilt after its NATS connection was closed for
	// good), observed: counters, stall, the table's last counts. prev is
	// of the same kind. Called before Run.
	Inherit(prev Source)
}

// Checks are a source's probes (see Source.Checks).
type Checks struct {
	Ready, Alive []health.Check
}

// Deps are what the relay builds before its source and hands to it: one
// of each, shared by the relay's own services. What only some sources use
// (the tracer of the bridge table's sources) they build themselves.
type Deps struct {
	Config    *config.Config
	Logger    *slog.Logger
	DB        *outbox.DB
	Conn      *nats.Conn
	JetStream jetstream.JetStream
	Streams   broker.Streams
	Denials   *broker.Denials
	Pinger    *broker.Pinger
	Keeper    *broker.Keeper
	Guard     *dedup.Guard
	Routes    *dedup.Routes
	// Registry is the relay's one registry: a source registers there what
	// it builds with a Registerer (the forwarder's histograms) and returns
	// the rest from Collectors.
	Registry *prometheus.Registry
}

// Open is the first half of a source's constructor, run before the relay
// connects to NATS: it checks what the source reads (the bridge table
// exists and is migrated) so that a configuration error is told first,
// and returns the second half.
type Open func(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) (Build, error)

// Build is the second half of a source's constructor (see Open). The
// cleanup releases what the source holds; it runs after Run returned.
type Build func(ctx context.Context, d Deps) (Source, func(), error)

// BuildOf is the Build of a source's injector, which returns its own type.
func BuildOf[S Source](build func(context.Context, Deps) (S, func(), error)) Build {
	return func(ctx context.Context, d Deps) (Source, func(), error) {
		s, cleanup, err := build(ctx, d)
		if err != nil {
			return nil, nil, err // not a typed nil in the interface
		}
		return s, cleanup, nil
	}
}

// OpenTable is the Open of a source of the bridge table (table,
// postgres-wal): it checks that the configured table exists and is
// migrated (outbox.OpenStore), before the relay connects to NATS, and
// hands the store to the source's injector build.
func OpenTable[S Source](build func(context.Context, Deps, *outbox.Store) (S, func(), error)) Open {
	return func(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) (Build, error) {
		store, err := outbox.OpenStore(ctx, db, cfg.Database.Table, logger)
		if err != nil {
			return nil, err
		}
		return BuildOf(func(ctx context.Context, d Deps) (S, func(), error) { return build(ctx, d, store) }), nil
	}
}

// ProvideReconciler builds the reconciler of a source of the bridge table
// (dedup.ProvideReconciler): the stream of a subject is looked up on a
// relayed row of that subject in store.
func ProvideReconciler(js jetstream.JetStream, routes *dedup.Routes, store *outbox.Store, keeper *broker.Keeper, cfg *config.Config, logger *slog.Logger) *dedup.Reconciler {
	return dedup.ProvideTableReconciler(js, routes, store.RelayedStream, keeper, cfg, cfg.NamespaceFor(store.Table()), logger)
}

// ProvidePayloadLimit is the max_payload of the NATS server nc is
// connected to, from its INFO.
func ProvidePayloadLimit(nc *nats.Conn) outbox.PayloadLimit { return nc.MaxPayload }

// WatchStalls watches src with relay.stall_after and
// relay.stall_unhealthy_after (0: never unhealthy), counting rows held for
// the broker (streams without a leader, broker.Keeper.Outage) as a stall;
// see StallWatch.HeldBy.
func WatchStalls(src StallSource, keeper *broker.Keeper, cfg *config.Config, logger *slog.Logger) *StallWatch {
	unhealthy := cfg.Relay.StallUnhealthyAfter
	if unhealthy == 0 {
		unhealthy = -1
	}
	w := NewStallWatch(src, logger, StallConfig{After: cfg.Relay.StallAfter, UnhealthyAfter: unhealthy})
	w.HeldBy(keeper.Outage)
	return w
}
