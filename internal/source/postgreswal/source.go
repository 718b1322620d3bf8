package postgreswal

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

// Source is the relay's half for source: postgres-wal: the subscriber over
// the replication slot, the forwarder of source: table over it, the stall
// watch and the reconciler of rows published again.
type Source struct {
	Forwarder  *forwarder.Forwarder
	Subscriber *Subscriber
	Stall      *source.StallWatch
	Reconciler *dedup.Reconciler
	Store      *outbox.Store
	Config     *config.Config
	Logger     *slog.Logger
}

// Run relays until ctx ends, then drains: reading stops, publishes in
// progress finish, marks are written and the slot's position is
// confirmed. A lost replication slot does not stop it: the subscriber
// waits for the slot (readiness says so).
func (s *Source) Run(ctx context.Context) error { return s.Forwarder.Run(ctx) }

// Describe names the database (redacted), the table, the slot and the
// publication.
func (s *Source) Describe() []slog.Attr {
	return []slog.Attr{slog.String("outbox", s.Store.DB().Redacted), slog.String("table", s.Store.Table()),
		slog.String("slot", s.Config.WAL.Slot), slog.String("publication", s.Config.WAL.Publication), s.Store.DB().StatementsAttr()}
}

// Collectors are the subscriber's, the slot's, the table's, the stall
// watch's and the reconciler's metrics.
func (s *Source) Collectors() []prometheus.Collector {
	cs := append(s.Subscriber.Collectors(), NewSlotCollector(s.Store.DB().SQL, s.Config.WAL.Slot, 5*time.Second),
		outbox.NewTableCollector(s.Store, 15*time.Second), s.Stall.Collector())
	return append(cs, s.Reconciler.Collectors()...)
}

// Checks: ready while the replication stream runs, or another process
// holds the slot and this relay waits as a standby (ready, naming the
// holder); not alive once stalled for relay.stall_unhealthy_after in the
// active role — a standby, or a relay whose stream cannot start, stays
// alive (see Subscriber.StallSource).
func (s *Source) Checks() source.Checks {
	return source.Checks{
		Ready: []health.Check{{Name: "replication", Check: s.Subscriber.Ready}},
		Alive: []health.Check{{Name: "stall", Check: s.Stall.Alive}},
	}
}

// Services: the stall watch and, unless relay.delete_on_relay is set,
// retention.
func (s *Source) Services() []func(context.Context) {
	return source.LogSourceServices(s.Stall.Run, s.Config.Relay, s.Store, s.Logger)
}

// Inherit takes over prev's stall and when its rows last moved, so that a
// stall lasts across rebuilds (the stall timer measures rows not moving,
// whatever happens to connections), its counters and the reconciler's.
func (s *Source) Inherit(prev source.Source) {
	p, ok := prev.(*Source)
	if !ok {
		return
	}
	s.Subscriber.Inherit(p.Subscriber)
	s.Stall.Inherit(p.Stall)
	s.Reconciler.Inherit(p.Reconciler)
}
