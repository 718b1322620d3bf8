package table

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// Source is the relay's half for source: table: the claims of the bridge
// table (Subscriber), the forwarder over them, the stall watch, the
// table's counts and the reconciler of rows published again.
type Source struct {
	Forwarder  *forwarder.Forwarder
	Subscriber *Subscriber
	Stall      *source.StallWatch
	Table      *outbox.TableCollector
	Reconciler *dedup.Reconciler
	Store      *outbox.Store
	Pinger     *broker.Pinger
	Config     *config.Config
	Logger     *slog.Logger
}

// Run relays until ctx ends, then drains: claiming stops, publishes in
// progress finish or are released and marks are flushed.
func (s *Source) Run(ctx context.Context) error { return s.Forwarder.Run(ctx) }

// Describe names the database (redacted), the table, the owner and how
// the statements reach the server (outbox.DB.Statements).
func (s *Source) Describe() []slog.Attr {
	return []slog.Attr{slog.String("outbox", s.Store.DB().Redacted), slog.String("table", s.Store.Table()), slog.String("owner", s.Config.Relay.Owner), s.Store.DB().StatementsAttr()}
}

// Collectors are the subscriber's counters, the table's counts, the stall
// watch's and the reconciler's metrics.
func (s *Source) Collectors() []prometheus.Collector {
	cs := append(s.Subscriber.Collectors(), s.Table, s.Stall.Collector())
	return append(cs, s.Reconciler.Collectors()...)
}

// Checks: the relay of the bridge table is ready while its claims and
// settlement writes work ("outbox": failing three times in a row, or a
// statement past its deadline, fails it, naming the error), and not alive
// once it has been stalled for relay.stall_unhealthy_after while its
// claims do not fail (see source.StallWatch.Alive).
func (s *Source) Checks() source.Checks {
	return source.Checks{
		Ready: []health.Check{{Name: "outbox", Check: s.Subscriber.Ready}},
		Alive: []health.Check{{Name: "stall", Check: s.Stall.Alive}},
	}
}

// Services: the stall watch, the network probe the claims wait for
// (CanClaim) and, on PostgreSQL, the LISTEN session that wakes the claims.
func (s *Source) Services() []func(context.Context) {
	services := []func(context.Context){s.Stall.Run, s.Pinger.Run}
	if db := s.Store.DB(); db.Capabilities().SupportsNotify {
		services = append(services, func(ctx context.Context) {
			outbox.ListenPostgres(ctx, db, s.Store.Table(), s.Subscriber.Wake, s.Logger,
				func() { s.Subscriber.Signals.Listening.Signal(struct{}{}) })
		})
	}
	return services
}

// Inherit takes over prev's counters, the time since its last claim and
// its stall, the table's last counts and the reconciler's counts.
func (s *Source) Inherit(prev source.Source) {
	p, ok := prev.(*Source)
	if !ok {
		return
	}
	s.Subscriber.Inherit(p.Subscriber)
	s.Stall.Inherit(p.Stall)
	s.Table.Inherit(p.Table)
	s.Reconciler.Inherit(p.Reconciler)
}

// claimGate is the network probe: nothing is claimed while the NATS
// connection is not connected, the server does not answer, or it refused
// the relay's reply inbox (no PubAck could arrive).
func claimGate(p *broker.Pinger, d *broker.Denials) ClaimGate {
	return func() bool { return p.Responsive() && d.Inbox() == nil }
}
