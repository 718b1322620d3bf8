package bridge

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/daemon"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder"
)

// Relay is the assembled daemon of `bridge run`.
type Relay struct {
	Forwarder  *forwarder.Forwarder
	Subscriber *outbox.Subscriber
	Guard      *dedup.Guard
	Keeper     *broker.Keeper
	Pinger     *broker.Pinger
	Stall      *outbox.StallWatch
	Table      *outbox.TableCollector
	Reconciler *dedup.Reconciler
	Health     *health.Server
	Probes     *health.Probes
	Store      *outbox.Store
	Conn       *nats.Conn
	Streams    broker.Streams
	Config     *config.Config
	Logger     *slog.Logger
}

// Run relays until ctx ends, then drains: claiming stops, publishes in
// progress finish or are released and marks are flushed. Beside the relay
// run the duplicate-window guard, the stream keeper, the stall watch and
// the PostgreSQL listener; the subscriber runs in-flight recovery and
// retention. It returns nil after a clean drain, and an
// error wrapping daemon.ErrConnectionClosed, after the same drain, when
// the NATS connection was closed for good.
func (r *Relay) Run(ctx context.Context) error {
	streams := r.Streams.Names()
	r.Logger.Info("relay running",
		slog.String("outbox", r.Store.DB().Redacted), slog.String("table", r.Store.Table()),
		slog.Any("streams", streams), slog.String("http", r.Health.Addr()), slog.String("owner", r.Config.Relay.Owner))

	daemon.LogStreams(r.Logger, streams)
	r.Stall.HeldBy(r.Keeper.Outage)
	services := []func(context.Context){
		func(ctx context.Context) { r.Guard.Run(ctx, dedup.GuardIntervalDefault) },
		func(ctx context.Context) { r.Keeper.Run(ctx, broker.KeeperIntervalDefault) },
		r.Stall.Run,
		r.Pinger.Run,
	}
	if r.Store.DB().Capabilities().SupportsNotify {
		services = append(services, func(ctx context.Context) {
			outbox.ListenPostgres(ctx, r.Store.DB(), r.Store.Table(), r.Subscriber.Wake, r.Logger)
		})
	}
	r.Health.Running(r.Probes)
	return daemon.Run(ctx, r.Conn, r.Logger, r.Forwarder.Run, services...)
}

// Inherit takes over what prev, the relay this process ran before this one
// (its NATS connection was closed for good), observed: counters, the time
// since its last claim and its stall, the table's last counts, the guard's
// findings, the keeper's and the reconciler's counts. Metrics and health
// then go on across the rebuild instead of starting from zero. Call it
// before Run.
func (r *Relay) Inherit(prev Daemon) {
	p, ok := prev.(*Relay)
	if !ok {
		return
	}
	r.Subscriber.Inherit(p.Subscriber)
	r.Stall.Inherit(p.Stall)
	r.Table.Inherit(p.Table)
	r.Guard.Inherit(p.Guard)
	r.Keeper.Inherit(p.Keeper)
	r.Reconciler.Inherit(p.Reconciler)
}

// reconciler is the dedup.Reconciler as the subscriber sees it.
func reconciler(r *dedup.Reconciler) outbox.Reconciler { return r }

// relayedStreams finds the stream of a subject in the outbox table, on a
// relayed row of that subject, for the reconciler.
func relayedStreams(store *outbox.Store) dedup.RelayedStreams { return store.RelayedStream }

// claimGate is the network probe: nothing is claimed while the NATS
// connection is not connected, the server does not answer, or it refused
// the relay's reply inbox (no PubAck could arrive).
func claimGate(p *broker.Pinger, d *broker.Denials) outbox.ClaimGate {
	return func() bool { return p.Responsive() && d.Inbox() == nil }
}

// payloadLimit is the max_payload of the NATS server the relay is
// connected to, from its INFO.
func payloadLimit(nc *nats.Conn) outbox.PayloadLimit { return nc.MaxPayload }

// provideRegistry registers the relay's metrics and the Go runtime and
// process collectors.
func provideRegistry(sub *outbox.Subscriber, table *outbox.TableCollector, guard *dedup.Guard, rec *dedup.Reconciler, keeper *broker.Keeper, stall *outbox.StallWatch) (*prometheus.Registry, error) {
	cs := append(sub.Collectors(), table, keeper.Collector(), stall.Collector())
	cs = append(cs, guard.Collectors()...)
	return newRegistry(append(cs, rec.Collectors()...)...)
}

// newRegistry registers cs and the Go runtime and process collectors
// (the health server adds its own bridge_ready and bridge_build_info).
func newRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// provideHealth lists the relay's probes: readiness (database reachable
// and accepting writes: not a standby, not read-only),
// NATS connected, ensured streams present; the streams whose rows the
// duplicate-window guard holds back are named without failing it; the
// source's own readiness checks) and the source's liveness checks, with
// the relay's metrics.
func provideHealth(reg *prometheus.Registry, db *outbox.DB, pinger *broker.Pinger, denials *broker.Denials, keeper *broker.Keeper, guard *dedup.Guard, source sourceChecks) *health.Probes {
	checks := []health.Check{
		{Name: "database", Check: db.CheckWritable},
		{Name: "nats", Check: func(ctx context.Context) error {
			if err := pinger.Check(ctx); err != nil {
				return err
			}
			return denials.Inbox()
		}},
		// Ensured streams present; no stream in an outage (no leader, no
		// quorum: failing until a publish to it succeeds); degraded while an
		// ensured stream exists with other settings (broker.Keeper.Check).
		{Name: "streams", Check: keeper.Check},
		{Name: "dedup_guard", Check: func(context.Context) error { return guardDetail(guard) }},
	}
	return &health.Probes{Gatherer: reg, Ready: append(checks, source.Ready...), Alive: source.Alive}
}

// sourceChecks are the checks of a source's relay: readiness besides the
// database, NATS, the streams and the guard, and liveness besides the
// process being up.
type sourceChecks struct {
	Ready, Alive []health.Check
}

// tableChecks: the relay of the bridge table is ready while its claims
// and settlement writes work ("outbox": failing three times in a row, or
// a statement past its deadline, fails it, naming the error), and not
// alive once it has been stalled for relay.stall_unhealthy_after while its
// claims do not fail (see outbox.StallWatch.Alive).
func tableChecks(stall *outbox.StallWatch, sub *outbox.Subscriber) sourceChecks {
	return sourceChecks{
		Ready: []health.Check{{Name: "outbox", Check: sub.Ready}},
		Alive: []health.Check{{Name: "stall", Check: stall.Alive}},
	}
}

// watermillChecks: watermill-sql's subscriber keeps no state per message
// to tell a stall by.
func watermillChecks() sourceChecks { return sourceChecks{} }

// provideWALHealth is provideHealth for source: postgres-wal, with one more
// readiness check — the replication stream runs, or another process holds
// the slot and this relay waits as a standby (ready, naming the holder) —
// and the stall watch as liveness: a relay stalled for
// relay.stall_unhealthy_after in the active role fails it; a standby, or
// a relay whose stream cannot start, does not (see postgreswal.StallSource).
func provideWALHealth(reg *prometheus.Registry, db *outbox.DB, pinger *broker.Pinger, denials *broker.Denials, keeper *broker.Keeper, guard *dedup.Guard, sub *postgreswal.Subscriber, stall *outbox.StallWatch) *health.Probes {
	p := provideHealth(reg, db, pinger, denials, keeper, guard, sourceChecks{Alive: []health.Check{{Name: "stall", Check: stall.Alive}}})
	p.Ready = append(p.Ready, health.Check{Name: "replication", Check: sub.Ready})
	return p
}

// guardDetail names the streams whose rows the guard holds back, and the
// streams it cannot check, as a partial fault (health.Degraded): the other
// streams flow, and the unchecked ones too, unguarded.
func guardDetail(guard *dedup.Guard) error {
	var parts []string
	for _, u := range guard.Unsafe() {
		parts = append(parts, "rows held back: "+u.Error())
	}
	for _, why := range guard.Unchecked() {
		parts = append(parts, "cannot check (rows published unchecked): "+why)
	}
	if len(parts) == 0 {
		return nil
	}
	return health.Degraded(errors.New(strings.Join(parts, "; ")))
}

// Daemon is what `bridge run` runs: the relay of the configured source.
type Daemon interface {
	Run(ctx context.Context) error
}

// NewDaemon builds the relay of source: NewRelay for the bridge table
// (source: table), NewWALRelay for the bridge table read from PostgreSQL's
// write-ahead log (source: postgres-wal), NewWatermillRelay for the tables
// of a Watermill forwarder (source: watermill-forwarder), reporting through
// hs. The cleanup is the injector's.
func NewDaemon(ctx context.Context, cfg *config.Config, logger *slog.Logger, hs *health.Server) (Daemon, func(), error) {
	if cfg.Source == config.SourcePostgresWAL {
		relay, cleanup, err := NewWALRelay(ctx, cfg, logger, hs)
		if err != nil {
			return nil, nil, err
		}
		return walRelay{relay}, cleanup, nil
	}
	if cfg.Source == config.SourceWatermillForwarder {
		relay, cleanup, err := NewWatermillRelay(ctx, cfg, logger, hs)
		if err != nil {
			return nil, nil, err
		}
		return watermillRelay{relay}, cleanup, nil
	}
	relay, cleanup, err := NewRelay(ctx, cfg, logger, hs)
	if err != nil {
		return nil, nil, err
	}
	return relay, cleanup, nil
}

// walRelay is the relay of source: postgres-wal as a Daemon that inherits
// from an earlier one (its stall watch and when rows last moved).
type walRelay struct{ *postgreswal.Relay }

func (r walRelay) Inherit(prev Daemon) {
	if p, ok := prev.(walRelay); ok {
		r.Relay.Inherit(p.Relay)
	}
}

// watermillRelay is the relay of source: watermill-forwarder as a Daemon
// that inherits from an earlier one.
type watermillRelay struct{ *watermillforwarder.Relay }

func (r watermillRelay) Inherit(prev Daemon) {
	if p, ok := prev.(watermillRelay); ok {
		r.Relay.Inherit(p.Relay)
	}
}

// provideWatermillRegistry registers the watermill-forwarder relay's
// metrics and the Go runtime and process collectors.
func provideWatermillRegistry(f *watermillforwarder.Forwarder, guard *dedup.Guard, keeper *broker.Keeper) (*prometheus.Registry, error) {
	return newRegistry(append(append(f.Collectors(), keeper.Collector()), guard.Collectors()...)...)
}

// provideWALRegistry registers the postgres-wal relay's metrics: the
// subscriber's, the slot's, the table's, the stream keeper's, the stall
// watch's, the guard's, the reconciler's, and the Go runtime and process collectors.
func provideWALRegistry(sub *postgreswal.Subscriber, store *outbox.Store, guard *dedup.Guard, rec *dedup.Reconciler, keeper *broker.Keeper, stall *outbox.StallWatch, cfg *config.Config) (*prometheus.Registry, error) {
	cs := append(sub.Collectors(), postgreswal.NewSlotCollector(store.DB().SQL, cfg.WAL.Slot, 5*time.Second),
		outbox.NewTableCollector(store, 15*time.Second), keeper.Collector(), stall.Collector())
	cs = append(cs, guard.Collectors()...)
	return newRegistry(append(cs, rec.Collectors()...)...)
}

// provideTableStore is outbox.ProvideStore for the commands that work on
// the bridge table (enqueue, status, requeue, retry, purge), read by
// source: table or postgres-wal: with source: watermill-forwarder there is
// no such table to work on, which is a configuration error (exit 2).
func provideTableStore(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) (*outbox.Store, error) {
	if cfg.Source == config.SourceWatermillForwarder {
		return nil, &config.Error{Key: "source", Value: cfg.Source,
			Allowed: "this command works on the bridge table only (source: table); with watermill-forwarder the relay reads " +
				watermillforwarder.MessagesTable(cfg.Watermill.ForwarderTopic) + " through watermill-sql's consumer-group offset, which keeps no state per message"}
	}
	return outbox.ProvideStore(ctx, db, cfg, logger)
}
