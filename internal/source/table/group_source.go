package table

import (
	"context"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// GroupSource is the relay's half for source: table over several tables
// (database.tables): the Group of their subscribers and the one forwarder
// over it. Each table's metrics carry the label table; its stall watch,
// claims and marks are its own.
type GroupSource struct {
	Forwarder *forwarder.Forwarder
	Group     *Group
	Pinger    *broker.Pinger
	DB        *outbox.DB
	Config    *config.Config
}

// Open checks the configured table (database.table) or tables
// (database.tables), before the relay connects to NATS: one table as
// source.OpenTable; several are resolved (outbox.DB.ResolveTables) and
// opened, a name that does not exist or is not migrated being an error
// and a pattern matching nothing a warning.
func Open(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) (source.Build, error) {
	if len(cfg.Database.Tables) == 0 {
		return openOne(ctx, db, cfg, logger)
	}
	return openGroup(ctx, db, cfg, logger)
}

var openOne = source.OpenTable(build)

// openGroup resolves and opens the tables of database.tables. A table a
// pattern matched that cannot be opened does not stop the others: the
// group names it and tries again at each refresh.
func openGroup(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) (source.Build, error) {
	stores, unopened, err := source.OpenTables(ctx, db, cfg, logger)
	if err != nil {
		return nil, err
	}
	return source.BuildOf(func(ctx context.Context, d source.Deps) (*GroupSource, func(), error) {
		return buildGroup(ctx, d, groupTables{stores: stores, unopened: unopened})
	}), nil
}

// groupTables are the tables a group starts with.
type groupTables struct {
	stores   []*outbox.Store
	unopened map[string]string
}

// Run relays until ctx ends, then drains every table.
func (s *GroupSource) Run(ctx context.Context) error { return s.Forwarder.Run(ctx) }

// Describe names the database (redacted), the tables configured, how many
// are relayed and the owner.
func (s *GroupSource) Describe() []slog.Attr {
	return []slog.Attr{slog.String("outbox", s.DB.Redacted), slog.String("tables", strings.Join(s.Config.Database.Tables, ",")),
		slog.Int("tables_relayed", len(s.Group.Tables())), slog.String("owner", s.Config.Relay.Owner), s.DB.StatementsAttr()}
}

// Collectors: bridge_outbox_tables; each table's own metrics are
// registered while it is relayed, labelled table.
func (s *GroupSource) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.Group.Collector()}
}

// Checks: ready while every table's claims and marks work, degraded
// naming the tables that fail while others relay (Group.Ready); not alive
// when a table's stall watch says so (Group.Alive).
func (s *GroupSource) Checks() source.Checks {
	return source.Checks{
		Ready: []health.Check{{Name: "outbox", Check: s.Group.Ready}},
		Alive: []health.Check{{Name: "stall", Check: s.Group.Alive}},
	}
}

// Services: the network probe the claims wait for. The tables' stall
// watches run in the group, one per table; notifications (the opt-in
// trigger) are not listened for over several tables: the claims poll.
func (s *GroupSource) Services() []func(context.Context) {
	return []func(context.Context){s.Pinger.Run}
}

// Inherit takes over prev's tables' counters, stalls and last counts.
func (s *GroupSource) Inherit(prev source.Source) {
	if p, ok := prev.(*GroupSource); ok {
		s.Group.Inherit(p.Group)
	}
}
