package postgreswal

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

// ProviderSet builds the postgres-wal source: the subscriber over the
// slot and the forwarder (the same router and handler as source: table)
// that publishes its messages.
var ProviderSet = wire.NewSet(ProvideSubscriber, ProvideForwarder, ProvideStallWatch)

// NamesOf returns the table, publication and slot of the configuration.
func NamesOf(cfg *config.Config) Names {
	return Names{Table: cfg.Database.Table, Publication: cfg.WAL.Publication, Slot: cfg.WAL.Slot}
}

// ProvideSubscriber builds the subscriber from wal.*, relay.* and
// dedup.namespace. It drains for shutdown_timeout less 3 s, leaving the
// router time to stop. While nc is disconnected, failed rows wait for it;
// rows published again long after their first publish are reconciled
// against the stream first.
func ProvideSubscriber(ctx context.Context, db *outbox.DB, store *outbox.Store, nc *nats.Conn, reconciler source.Reconciler, cfg *config.Config, logger *slog.Logger) (*Subscriber, error) {
	return NewSubscriber(ctx, db, store, logger, subscriberConfig(cfg, cfg.Database.Table, nc, reconciler))
}

// subscriberConfig is the Config of the subscriber of table.
func subscriberConfig(cfg *config.Config, table string, nc *nats.Conn, reconciler source.Reconciler) Config {
	names := NamesOf(cfg)
	names.Table = table
	return Config{
		Names:                 names,
		ReplicationURL:        cfg.ReplicationURLOrDefault(),
		LogDelivery:           source.LogDeliveryOf(cfg, table, cfg.WAL.SweepInterval, nc.MaxPayload, nc.IsConnected, reconciler),
		RowsDeletedByProducer: cfg.WAL.RowsDeletedByProducer,
		SessionName:           outbox.SessionName(cfg.Relay.Owner),
	}
}

// provideStream opens the reader of the slot of a group of tables
// (openSlotStream), checked with the first table opened when there is one.
func provideStream(ctx context.Context, db *outbox.DB, tables groupTables, nc *nats.Conn, cfg *config.Config, logger *slog.Logger) (*slotStream, error) {
	first := ""
	if len(tables.stores) > 0 {
		first = tables.stores[0].Table()
	}
	return openSlotStream(ctx, db, logger, subscriberConfig(cfg, first, nc, nil))
}

// provideMemberSubscriber builds the subscriber of one table of a group,
// on the group's stream.
func provideMemberSubscriber(ctx context.Context, stream *slotStream, store *outbox.Store, nc *nats.Conn, reconciler source.Reconciler, cfg *config.Config, logger *slog.Logger) (*Subscriber, error) {
	return newMember(ctx, stream, store, logger, subscriberConfig(cfg, store.Table(), nc, reconciler))
}

// provideGroup builds the group of the tables over stream; each table's
// parts are built by buildMember.
func provideGroup(ctx context.Context, d source.Deps, tables groupTables, stream *slotStream) *Group {
	cfg := d.Config
	retention := time.Duration(0)
	if !cfg.Relay.DeleteOnRelay {
		retention = cfg.Relay.Retention
	}
	return NewGroup(d.DB, stream, tables.stores, tables.unopened, d.Logger, GroupConfig{
		Names: cfg.Database.Tables, Refresh: cfg.Database.TablesRefresh, Retention: retention, Registerer: d.Registry,
		Build: func(ctx context.Context, store *outbox.Store) (*memberParts, func(), error) {
			return buildMember(ctx, d, store, stream)
		},
	})
}

// ProvideGroupForwarder builds the router over the group (forwarder.Provide).
func ProvideGroupForwarder(g *Group, pub *sink.Publisher, nc *nats.Conn, guard *dedup.Guard, keeper *broker.Keeper, tracer trace.Tracer, reg *prometheus.Registry, cfg *config.Config, logger *slog.Logger) (*forwarder.Forwarder, error) {
	return forwarder.Provide(source.Coalesce(g, cfg.Relay.BatchSize), strings.Join(cfg.Database.Tables, ","), pub, nc, guard, keeper, tracer, reg, cfg, logger)
}

// ProvideStallWatch watches the subscriber (see Subscriber.StallSource)
// as the table source's relay is watched (source.WatchStalls).
func ProvideStallWatch(sub *Subscriber, keeper *broker.Keeper, cfg *config.Config, logger *slog.Logger) *source.StallWatch {
	return source.WatchStalls(sub.StallSource(), keeper, cfg, logger.With(slog.String("component", "postgres-wal")))
}

// ProvideForwarder builds the router over the subscriber, closing within
// shutdown_timeout: the forwarder of source: table, so that a row is
// published, classified and recorded the same way whichever source read
// it. The subscriber's messages, one per row, reach it in batches of at
// most relay.batch_size (source.Coalesce).
func ProvideForwarder(sub *Subscriber, store *outbox.Store, pub *sink.Publisher, nc *nats.Conn, guard *dedup.Guard, keeper *broker.Keeper, tracer trace.Tracer, reg *prometheus.Registry, cfg *config.Config, logger *slog.Logger) (*forwarder.Forwarder, error) {
	return forwarder.Provide(source.Coalesce(sub, cfg.Relay.BatchSize), store.Table(), pub, nc, guard, keeper, tracer, reg, cfg, logger)
}
