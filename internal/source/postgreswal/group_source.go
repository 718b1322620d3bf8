package postgreswal

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// GroupSource is the relay's half for source: postgres-wal over several
// tables (database.tables): the Group of their subscribers on one slot and
// the one forwarder over it. Each table's metrics carry the label table;
// the slot's are the relay's.
type GroupSource struct {
	Forwarder *forwarder.Forwarder
	Group     *Group
	DB        *outbox.DB
	Config    *config.Config
}

// Open checks the configured table (database.table) as source.OpenTable,
// or resolves and opens the tables of database.tables
// (source.OpenTables), before the relay connects to NATS.
func Open(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) (source.Build, error) {
	if len(cfg.Database.Tables) == 0 {
		return openOne(ctx, db, cfg, logger)
	}
	stores, unopened, err := source.OpenTables(ctx, db, cfg, logger)
	if err != nil {
		return nil, err
	}
	return source.BuildOf(func(ctx context.Context, d source.Deps) (*GroupSource, func(), error) {
		return buildGroup(ctx, d, groupTables{stores: stores, unopened: unopened})
	}), nil
}

var openOne = source.OpenTable(build)

// groupTables are the tables a group starts with.
type groupTables struct {
	stores   []*outbox.Store
	unopened map[string]string
}

// Run relays until ctx ends, then drains every table and confirms the
// slot's final position.
func (s *GroupSource) Run(ctx context.Context) error { return s.Forwarder.Run(ctx) }

// Describe names the database (redacted), the tables configured, how many
// are relayed, the slot and the publication.
func (s *GroupSource) Describe() []slog.Attr {
	return []slog.Attr{slog.String("outbox", s.DB.Redacted), slog.String("tables", strings.Join(s.Config.Database.Tables, ",")),
		slog.Int("tables_relayed", len(s.Group.Tables())), slog.String("slot", s.Config.WAL.Slot), slog.String("publication", s.Config.WAL.Publication), s.DB.StatementsAttr()}
}

// Collectors: the slot's metrics and bridge_outbox_tables; each table's
// own are registered while it is relayed, labelled table.
func (s *GroupSource) Collectors() []prometheus.Collector {
	return []prometheus.Collector{NewSlotCollector(s.DB.SQL, s.Config.WAL.Slot, 5*time.Second), s.Group.Collector()}
}

// Checks: ready while the replication stream runs (degraded as a standby,
// or naming the tables whose publication fault or rows set aside need
// looking at: Group.Ready); not alive when a table's stall watch says so.
func (s *GroupSource) Checks() source.Checks {
	return source.Checks{
		Ready: []health.Check{{Name: "replication", Check: s.Group.Ready}},
		Alive: []health.Check{{Name: "stall", Check: s.Group.Alive}},
	}
}

// Services: none of its own; each table's stall watch and retention run
// in the group while the table is relayed.
func (s *GroupSource) Services() []func(context.Context) { return nil }

// Inherit takes over prev's tables' counters and stalls.
func (s *GroupSource) Inherit(prev source.Source) {
	if p, ok := prev.(*GroupSource); ok {
		s.Group.Inherit(p.Group)
	}
}
