package mysqlbinlog

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// Source is the relay's half for source: mysql-binlog: the subscriber over
// the binary log, the forwarder of source: table over it, the stall watch
// and the reconciler.
type Source struct {
	Forwarder  *forwarder.Forwarder
	Subscriber *Subscriber
	Stall      *source.StallWatch
	Reconciler *dedup.Reconciler
	Store      *outbox.Store
	Config     *config.Config
	Logger     *slog.Logger
}

// Open checks the server's binary log settings and the user's grants
// (CheckServer: ErrSettings, exit 2) and the configured table
// (source.OpenTable) before the relay connects to NATS.
func Open(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) (source.Build, error) {
	if _, err := CheckServer(ctx, db.SQL); err != nil {
		return nil, err
	}
	return openTable(ctx, db, cfg, logger)
}

var openTable = source.OpenTable(build)

// Run relays until ctx ends, then drains.
func (s *Source) Run(ctx context.Context) error { return s.Forwarder.Run(ctx) }

// Describe names the database (redacted), the table and the server_id.
func (s *Source) Describe() []slog.Attr {
	return []slog.Attr{slog.String("outbox", s.Store.DB().Redacted), slog.String("table", s.Store.Table()),
		slog.Uint64("server_id", uint64(s.Subscriber.cfg.ServerID)), s.Store.DB().StatementsAttr()}
}

// Collectors are the subscriber's, the table's, the stall watch's and the
// reconciler's metrics.
func (s *Source) Collectors() []prometheus.Collector {
	cs := append(s.Subscriber.Collectors(), outbox.NewTableCollector(s.Store, 15*time.Second), s.Stall.Collector())
	return append(cs, s.Reconciler.Collectors()...)
}

// Checks: ready while the relay reads the binary log, or waits as a
// standby (ready, naming the holder); not alive once stalled for
// relay.stall_unhealthy_after outside a standby.
func (s *Source) Checks() source.Checks {
	return source.Checks{
		Ready: []health.Check{{Name: "binlog", Check: s.Subscriber.Ready}},
		Alive: []health.Check{{Name: "stall", Check: s.Stall.Alive}},
	}
}

// Services: the stall watch and, unless relay.delete_on_relay is set,
// retention.
func (s *Source) Services() []func(context.Context) {
	return source.LogSourceServices(s.Stall.Run, s.Config.Relay, s.Store, s.Logger)
}

// Inherit takes over prev's counters, stall and reconciler.
func (s *Source) Inherit(prev source.Source) {
	p, ok := prev.(*Source)
	if !ok {
		return
	}
	s.Subscriber.inherit(p.Subscriber)
	s.Stall.Inherit(p.Stall)
	s.Reconciler.Inherit(p.Reconciler)
}
