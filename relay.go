package bridge

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/daemon"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/source/mysqlbinlog"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
	"github.com/outbox-bridge/bridge/internal/source/table"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder"
)

// Relay is the assembled daemon of `bridge run`: the configured source
// (source.Source, one directory under internal/source per source: value)
// behind one NATS connection, one duplicate-window guard, one stream
// keeper, one registry and one health server.
type Relay struct {
	Source  source.Source
	Guard   *dedup.Guard
	Keeper  *broker.Keeper
	Health  *health.Server
	Probes  *health.Probes
	Conn    *nats.Conn
	Streams broker.Streams
	Config  *config.Config
	Logger  *slog.Logger
}

// Run relays until ctx ends, then drains (the source's Run). Beside the
// source run the duplicate-window guard, the stream keeper and the
// source's own services (its stall watch, LISTEN session, retention). It
// returns nil after a clean drain, and an error wrapping
// daemon.ErrConnectionClosed, after the same drain, when the NATS
// connection was closed for good.
func (r *Relay) Run(ctx context.Context) error {
	streams := r.Streams.Names()
	attrs := []any{slog.String("source", r.Config.Source)}
	for _, a := range r.Source.Describe() {
		attrs = append(attrs, a)
	}
	r.Logger.Info("relay running", append(attrs, slog.Any("streams", streams), slog.String("http", r.Health.Addr()))...)
	daemon.LogStreams(r.Logger, streams)
	services := append([]func(context.Context){
		func(ctx context.Context) { r.Guard.Run(ctx, dedup.GuardIntervalDefault) },
		func(ctx context.Context) { r.Keeper.Run(ctx, broker.KeeperIntervalDefault) },
	}, r.Source.Services()...)
	r.Health.Running(r.Probes)
	return daemon.Run(ctx, r.Conn, r.Logger, r.Source.Run, services...)
}

// Inherit takes over what prev, the relay this process ran before this one
// (its NATS connection was closed for good), observed: the source's
// counters and stall (source.Source.Inherit), the guard's findings and the
// keeper's counts. Metrics and health then go on across the rebuild
// instead of starting from zero. Call it before Run.
func (r *Relay) Inherit(prev Daemon) {
	p, ok := prev.(*Relay)
	if !ok {
		return
	}
	r.Source.Inherit(p.Source)
	r.Guard.Inherit(p.Guard)
	r.Keeper.Inherit(p.Keeper)
}

// sources lists every source: value and its constructor: adding a source
// is one directory under internal/source and one line here.
var sources = map[string]source.Open{
	config.SourceTable:              table.Open,
	config.SourcePostgresWAL:        postgreswal.Open,
	config.SourceMySQLBinlog:        mysqlbinlog.Open,
	config.SourceWatermillForwarder: watermillforwarder.Open,
}

// openSource runs the first half of the configured source's constructor
// (source.Open), before the relay connects to NATS.
func openSource(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) (source.Build, error) {
	open, ok := sources[cfg.Source]
	if !ok {
		return nil, &config.Error{Key: "source", Value: cfg.Source, Allowed: strings.Join(slices.Sorted(maps.Keys(sources)), ", ")}
	}
	return open(ctx, db, cfg, logger)
}

// buildSource runs the second half (source.Build) over what the relay
// built, then registers the source's metrics in the relay's registry.
func buildSource(ctx context.Context, build source.Build, d source.Deps) (source.Source, func(), error) {
	src, cleanup, err := build(ctx, d)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range src.Collectors() {
		if err := d.Registry.Register(c); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	return src, cleanup, nil
}

// provideRegistry is the relay's one registry: the Go runtime and process
// collectors, the stream keeper's and the guard's metrics; the source
// adds its own (buildSource), the health server its bridge_ready and
// bridge_build_info.
func provideRegistry(guard *dedup.Guard, keeper *broker.Keeper) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cs := append([]prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), keeper.Collector()},
		guard.Collectors()...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// provideHealth lists the relay's probes: readiness (database reachable
// and accepting writes: not a standby, not read-only), NATS connected,
// ensured streams present; the streams whose rows the duplicate-window
// guard holds back are named without failing it; then the source's own
// readiness checks) and the source's liveness checks, with the relay's
// metrics.
func provideHealth(reg *prometheus.Registry, db *outbox.DB, pinger *broker.Pinger, denials *broker.Denials, keeper *broker.Keeper, guard *dedup.Guard, src source.Source) *health.Probes {
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
	own := src.Checks()
	return &health.Probes{Gatherer: reg, Ready: append(checks, own.Ready...), Alive: own.Alive}
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

// NewDaemon builds the relay of the configured source (NewRelay),
// reporting through hs. The cleanup is the injector's.
func NewDaemon(ctx context.Context, cfg *config.Config, logger *slog.Logger, hs *health.Server) (Daemon, func(), error) {
	relay, cleanup, err := NewRelay(ctx, cfg, logger, hs)
	if err != nil {
		return nil, nil, err
	}
	return relay, cleanup, nil
}

// provideTableStore is outbox.OpenStore for the commands that work on
// the bridge table (enqueue, status, requeue, retry, purge), read by
// source: table or postgres-wal: with source: watermill-forwarder there is
// no such table to work on, which is a configuration error (exit 2).
func provideTableStore(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) (*outbox.Store, error) {
	if cfg.Source == config.SourceWatermillForwarder {
		return nil, &config.Error{Key: "source", Value: cfg.Source,
			Allowed: "this command works on the bridge table only (source: table); with watermill-forwarder the relay reads " +
				watermillforwarder.MessagesTable(cfg.Watermill.ForwarderTopic) + " through watermill-sql's consumer-group offset, which keeps no state per message"}
	}
	return outbox.OpenStore(ctx, db, cfg.Database.Table, logger)
}

// NewExistingDB opens the configured database as it is (see
// provideExistingDB), for the commands that act on several tables.
func NewExistingDB(ctx context.Context, cfg *config.Config) (*outbox.DB, func(), error) {
	return provideExistingDB(ctx, cfg)
}

// OpenTableStore opens table of db as the commands that read or change
// rows do: the bridge table only (source: table or postgres-wal), which
// must exist (outbox.ErrNoTable).
func OpenTableStore(ctx context.Context, db *outbox.DB, cfg *config.Config, table string, logger *slog.Logger) (*outbox.Store, error) {
	c := *cfg
	c.Database.Table = table
	return provideTableStore(ctx, db, &c, logger)
}

// provideDB opens the configured database for `bridge run` and `bridge
// enqueue`. The embedded default (no database.url) is migrated here; any
// other database must be migrated with `bridge migrate`.
func provideDB(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*outbox.DB, func(), error) {
	db, cleanup, err := openDB(ctx, cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	if cfg.EmbeddedDatabase() {
		applied, err := outbox.Migrate(ctx, db, cfg.Database.Table)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		if len(applied) > 0 {
			logger.Info("embedded outbox database migrated", slog.String("database", db.Redacted), slog.Int("migrations", len(applied)))
		}
	}
	return db, cleanup, nil
}

// provideExistingDB opens the configured database as it is, the embedded
// default too: for the commands that read or change rows (status, retry,
// requeue, purge, replay), where a table that is not there is a mistake
// to name (outbox.ErrNoTable: exit 2), not one to create.
func provideExistingDB(ctx context.Context, cfg *config.Config) (*outbox.DB, func(), error) {
	return openDB(ctx, cfg, nil)
}

// openDB opens the configured database; logger (nil: none) receives the
// lines the pool writes while it runs.
func openDB(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*outbox.DB, func(), error) {
	session := cfg.DatabaseSession()
	session.Logger = logger
	db, err := outbox.OpenSession(ctx, cfg.DatabaseURL(), session)
	if err != nil {
		return nil, nil, err
	}
	return db, func() { db.Close() }, nil
}
