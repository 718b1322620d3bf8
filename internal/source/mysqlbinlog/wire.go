package mysqlbinlog

import (
	"context"
	"log/slog"
	"reflect"
	"sync/atomic"

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

// ProviderSet builds the mysql-binlog source: the subscriber over the
// binary log and the forwarder (the same router and handler as source:
// table) that publishes its messages.
var ProviderSet = wire.NewSet(ProvideSubscriber, ProvideForwarder, ProvideStallWatch)

// ProvideSubscriber builds the subscriber from binlog.*, relay.* and
// dedup.namespace. It drains for shutdown_timeout less 3 s, leaving the
// router time to stop.
func ProvideSubscriber(ctx context.Context, db *outbox.DB, store *outbox.Store, nc *nats.Conn, reconciler *dedup.Reconciler, cfg *config.Config, logger *slog.Logger) (*Subscriber, error) {
	return NewSubscriber(ctx, db, store, logger, Config{
		Table:       store.Table(),
		URL:         cfg.DatabaseURL(),
		ServerID:    uint32(cfg.Binlog.ServerID),
		LogDelivery: source.LogDeliveryOf(cfg, store.Table(), cfg.Binlog.SweepInterval, nc.MaxPayload, nc.IsConnected, reconciler),
		Owner:       cfg.Relay.Owner,
	})
}

// ProvideStallWatch watches the subscriber as the table source's relay is
// watched (source.WatchStalls).
func ProvideStallWatch(sub *Subscriber, keeper *broker.Keeper, cfg *config.Config, logger *slog.Logger) *source.StallWatch {
	return source.WatchStalls(sub, keeper, cfg, logger.With(slog.String("component", "mysql-binlog")))
}

// ProvideForwarder builds the router over the subscriber, closing within
// shutdown_timeout: the forwarder of source: table, so that a row is
// published, classified and recorded the same way whichever source read
// it. The subscriber's messages, one per row, reach it in batches of at
// most relay.batch_size (source.Coalesce).
func ProvideForwarder(sub *Subscriber, store *outbox.Store, pub *sink.Publisher, nc *nats.Conn, guard *dedup.Guard, keeper *broker.Keeper, tracer trace.Tracer, reg *prometheus.Registry, cfg *config.Config, logger *slog.Logger) (*forwarder.Forwarder, error) {
	return forwarder.Provide(source.Coalesce(sub, cfg.Relay.BatchSize), store.Table(), pub, nc, guard, keeper, tracer, reg, cfg, logger)
}

// inherit adds prev's totals to s's, every counter of the struct (read by
// reflection, so that a counter added later cannot be left behind), and
// when rows last moved.
func (s *Subscriber) inherit(prev *Subscriber) {
	to, from := reflect.ValueOf(&s.Counters).Elem(), reflect.ValueOf(&prev.Counters).Elem()
	for i := range to.NumField() {
		to.Field(i).Addr().Interface().(*atomic.Int64).Add(from.Field(i).Addr().Interface().(*atomic.Int64).Load())
	}
	s.progress.Store(prev.progress.Load())
}
