package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// OpenTables resolves database.tables (outbox.DB.ResolveTables) and opens
// each table (outbox.OpenStore), before the relay connects to NATS, for a
// source over several tables. A plain name that does not exist or is not
// migrated is an error; a table a pattern matched that cannot be opened
// is returned in unopened (table → why), for the source to name and try
// again; a pattern matching nothing is a warning, and so are tables that
// share the duplicate window without a dedup.namespace of their own.
func OpenTables(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) (stores []*outbox.Store, unopened map[string]string, err error) {
	tables, unmatched, err := db.ResolveTables(ctx, cfg.Database.Tables)
	if err != nil {
		return nil, nil, err
	}
	if !cfg.NamespacePerTable() {
		logger.Warn("the tables share each stream's duplicate window: a row whose idempotency key another table also uses is taken for a duplicate and not stored; unless keys are unique across the tables, set dedup.namespace to '{schema}' or '{table}' (each table's ids its own)",
			slog.String("tables", strings.Join(cfg.Database.Tables, ",")), slog.String("dedup.namespace", cfg.Dedup.Namespace))
	}
	for _, p := range unmatched {
		logger.Warn("no outbox table matches the pattern yet; it is resolved again every database.tables_refresh",
			slog.String("table", p), slog.Duration("tables_refresh", cfg.Database.TablesRefresh))
	}
	named := map[string]bool{}
	for _, n := range cfg.Database.Tables {
		if !outbox.IsTablePattern(n) {
			named[db.FoldName(n)] = true
		}
	}
	unopened = map[string]string{}
	for _, t := range tables {
		store, err := outbox.OpenStore(ctx, db, t, logger)
		switch {
		case err != nil && named[db.FoldName(t)]:
			return nil, nil, err
		case err != nil:
			logger.Warn("outbox table matched and not relayed: it cannot be opened; trying again at each refresh", slog.String("table", t), slog.Any("error", err))
			unopened[db.FoldName(t)] = err.Error()
		default:
			stores = append(stores, store)
		}
	}
	return stores, unopened, nil
}

// readyListMax bounds the tables readiness names; the rest are counted.
const readyListMax = 10

// TablesReady is the readiness of a source over total tables of which
// those in failing ("<table>: <why>") fail: nil when none does, an error
// when every table fails, and health.Degraded naming the failing ones
// (ten, then a count) while others relay: their rows are not helped by a
// failing /readyz. degraded are tables that relay with a warning
// (health.Degraded of their own); they make the answer Degraded when
// nothing fails.
func TablesReady(total int, failing, degraded []string) error {
	if len(failing) == 0 && len(degraded) == 0 {
		return nil
	}
	list := failing
	if len(list) == 0 {
		list = degraded
	}
	slices.Sort(list)
	detail := fmt.Sprintf("%d of %d tables: %s", len(list), total, strings.Join(list[:min(len(list), readyListMax)], "; "))
	if len(list) > readyListMax {
		detail += fmt.Sprintf("; and %d more", len(list)-readyListMax)
	}
	if len(failing) == total && total > 0 {
		return errors.New(detail)
	}
	return health.Degraded(errors.New(detail))
}
