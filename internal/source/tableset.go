package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TableSet is what the sources over several tables (database.tables;
// table.Group, postgreswal.Group) keep of their tables alike: the tables
// relayed (members, by outbox.DB.FoldName), the tables matched that cannot
// be opened (not migrated yet) with why, what the relay before this one
// left of each table (for Inherit), and the resolution of the patterns
// again every refresh: a table matched since is added, one no longer
// matched is let go. How a table is started and let go is the source's
// (TableHooks).
//
// M is a member, one table relayed; P is what a member leaves to the
// same table's member in the next relay of the process.
type TableSet[M, P any] struct {
	// Refreshed receives the tables relayed after each resolution, sorted.
	Refreshed *TestSignal[[]string]

	db      *outbox.DB
	names   []string
	refresh time.Duration
	logger  *slog.Logger
	hooks   TableHooks[M, P]
	kick    chan struct{}

	mu        sync.Mutex
	members   map[string]M
	unopened  map[string]string // tables matched that could not be opened → why
	inherited map[string]P
	initial   []*outbox.Store
	closed    bool // no table is added once the set is closed (Close)
}

// TableHooks are what a source over several tables does with one table.
type TableHooks[M, P any] struct {
	// Table is the name of a member's table.
	Table func(M) string
	// Parts is what a member leaves to the next relay.
	Parts func(M) P
	// Add builds and starts the relay of store, calling TableSet.Admit
	// before it starts, or TableSet.SetUnopened when it cannot. later:
	// the table was matched by a refresh, after the start.
	Add func(ctx context.Context, store *outbox.Store, later bool)
	// LetGo stops relaying a member no longer matched, in the background.
	LetGo func(M)
}

// NewTableSet returns the set of stores (the tables resolved at start)
// and unopened (the tables matched at start that could not be opened,
// with why; nil for none), resolving names again every refresh.
func NewTableSet[M, P any](db *outbox.DB, names []string, refresh time.Duration, stores []*outbox.Store, unopened map[string]string, logger *slog.Logger, hooks TableHooks[M, P]) *TableSet[M, P] {
	if unopened == nil {
		unopened = map[string]string{}
	}
	return &TableSet[M, P]{
		db: db, names: names, refresh: refresh, logger: logger, hooks: hooks, kick: make(chan struct{}, 1),
		members: map[string]M{}, unopened: unopened, initial: stores,
	}
}

// Start adds the tables resolved at start (TableHooks.Add) and signals
// Refreshed.
func (s *TableSet[M, P]) Start(ctx context.Context) {
	s.mu.Lock()
	initial := s.initial
	s.initial = nil
	s.mu.Unlock()
	for _, store := range initial {
		s.hooks.Add(ctx, store, false)
	}
	s.Refreshed.Signal(s.Tables())
}

// RefreshLoop resolves the patterns again every refresh, and at once
// after Kick, until ctx ends or stop is closed.
func (s *TableSet[M, P]) RefreshLoop(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(s.refresh)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
			t.Reset(s.refresh)
		}
		s.resolve(ctx)
		s.Refreshed.Signal(s.Tables())
	}
}

// Kick makes the set resolve its tables again now: a table turned out
// missing (dropped), which the next refresh would let go anyway.
func (s *TableSet[M, P]) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// resolveTimeoutMin is the shortest time a refresh is given to list the
// tables and open the new ones.
const resolveTimeoutMin = 30 * time.Second

// resolve matches the patterns again: it adds the tables matched since
// and lets go of those no longer matched.
func (s *TableSet[M, P]) resolve(ctx context.Context) {
	// MariaDB lists tables slowly while it is busy (information_schema
	// opens each table's definition): more than 5 s over 150 tables in a
	// test. A slow listing delays only the next refresh.
	rctx, cancel := context.WithTimeout(ctx, max(s.refresh, resolveTimeoutMin))
	defer cancel()
	tables, _, err := s.db.ResolveTables(rctx, s.names)
	if err != nil {
		s.logger.Warn("outbox tables not resolved again; relaying those resolved before", slog.Any("error", err), slog.Duration("retry_in", s.refresh))
		return
	}
	want := map[string]string{}
	for _, t := range tables {
		want[s.db.FoldName(t)] = t
	}
	s.mu.Lock()
	var gone []M
	for key, m := range s.members {
		if _, ok := want[key]; !ok {
			gone = append(gone, m)
			delete(s.members, key)
		}
	}
	for key := range s.unopened {
		if _, ok := want[key]; !ok {
			delete(s.unopened, key)
		}
	}
	var added []string
	for key, t := range want {
		if _, ok := s.members[key]; !ok {
			added = append(added, t)
		}
	}
	s.mu.Unlock()
	for _, m := range gone {
		s.logger.Info("outbox table let go: no longer matched", slog.String("table", s.hooks.Table(m)))
		s.hooks.LetGo(m)
	}
	slices.Sort(added)
	for _, t := range added {
		store, err := outbox.OpenStore(rctx, s.db, t, s.logger)
		if err != nil {
			s.SetUnopened(t, err)
			continue
		}
		s.hooks.Add(ctx, store, true)
	}
}

// SetUnopened records why table could not be opened or started, logging
// it the first time it is seen or when the reason changed; the next
// refresh tries it again.
func (s *TableSet[M, P]) SetUnopened(table string, err error) {
	key, why := s.db.FoldName(table), err.Error()
	s.mu.Lock()
	prev, seen := s.unopened[key]
	s.unopened[key] = why
	s.mu.Unlock()
	if !seen || prev != why {
		s.logger.Warn("outbox table matched and not relayed: it cannot be opened; trying again at each refresh",
			slog.String("table", table), slog.Any("error", err), slog.Duration("refresh", s.refresh))
	}
}

// Admit makes m the member of table, before it starts; admitted is called
// under the set's lock with what the relay before left of the table (ok:
// there was some, and it was not taken over yet), to take it over. It returns false, without calling
// admitted, once the set is closed: m is not to be started.
func (s *TableSet[M, P]) Admit(table string, m M, admitted func(prev P, ok bool)) bool {
	key := s.db.FoldName(table)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	prev, ok := s.inherited[key]
	admitted(prev, ok)
	// Taken over once: a table let go and matched again later starts
	// afresh, not from what the relay before left (its counters would go
	// back, an old stall come back: a saboteur's run).
	delete(s.inherited, key)
	s.members[key] = m
	delete(s.unopened, key)
	return true
}

// Close closes the set, which admits no table after, and returns its
// members, each of which the caller stops; what they leave is kept for
// the group of the next relay (Inherit).
func (s *TableSet[M, P]) Close() []M {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.inherited == nil {
		s.inherited = map[string]P{}
	}
	members := make([]M, 0, len(s.members))
	for key, m := range s.members {
		s.inherited[key] = s.hooks.Parts(m)
		members = append(members, m)
	}
	s.members = map[string]M{}
	return members
}

// Inherit takes over what prev (the set of the relay this process ran
// before) left of each table, and of the tables it relays now. Call it
// before Start.
func (s *TableSet[M, P]) Inherit(prev *TableSet[M, P]) {
	prev.mu.Lock()
	parts := map[string]P{}
	for key, p := range prev.inherited {
		parts[key] = p
	}
	for key, m := range prev.members {
		parts[key] = prev.hooks.Parts(m)
	}
	prev.mu.Unlock()
	s.mu.Lock()
	s.inherited = parts
	s.mu.Unlock()
}

// Tables are the tables relayed now (before Start: those it will start
// with), sorted.
func (s *TableSet[M, P]) Tables() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.members)+len(s.initial))
	for _, m := range s.members {
		out = append(out, s.hooks.Table(m))
	}
	for _, st := range s.initial {
		out = append(out, st.Table())
	}
	slices.Sort(out)
	return out
}

// Members are the members now, in the order of their tables' names.
func (s *TableSet[M, P]) Members() []M {
	s.mu.Lock()
	members := make([]M, 0, len(s.members))
	for _, m := range s.members {
		members = append(members, m)
	}
	s.mu.Unlock()
	slices.SortFunc(members, func(a, b M) int { return strings.Compare(s.hooks.Table(a), s.hooks.Table(b)) })
	return members
}

// Ready lists, for readiness, the tables that fail: those matched that
// cannot be opened ("<table>: <why>") and the members whose check fails
// ("<table>: <error>"; a health.Degraded error goes to degraded instead).
// It is then source.TablesReady's answer, or health.Degraded while no
// table is matched at all.
func (s *TableSet[M, P]) Ready(ctx context.Context, check func(context.Context, M) error) error {
	members := s.Members()
	s.mu.Lock()
	var failing, degraded []string
	for key, why := range s.unopened {
		failing = append(failing, key+": "+why)
	}
	total := len(members) + len(s.unopened)
	s.mu.Unlock()
	for _, m := range members {
		switch err := check(ctx, m); {
		case err == nil:
		case health.IsDegraded(err):
			degraded = append(degraded, s.hooks.Table(m)+": "+err.Error())
		default:
			failing = append(failing, s.hooks.Table(m)+": "+err.Error())
		}
	}
	if total == 0 {
		return health.Degraded(fmt.Errorf("no outbox table matches %s yet (resolved again every database.tables_refresh, %s)", strings.Join(s.names, ", "), s.refresh))
	}
	return TablesReady(total, failing, degraded)
}

// Alive joins the errors of check over the members, each naming its
// table.
func (s *TableSet[M, P]) Alive(ctx context.Context, check func(context.Context, M) error) error {
	var errs []error
	for _, m := range s.Members() {
		if err := check(ctx, m); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.hooks.Table(m), err))
		}
	}
	return errors.Join(errs...)
}

// Collector exposes the gauge bridge_outbox_tables{state}: the tables
// relayed (state="relayed") and those matched that cannot be opened
// (state="unopened").
func (s *TableSet[M, P]) Collector() prometheus.Collector {
	desc := prometheus.NewDesc("bridge_outbox_tables", "Outbox tables of database.tables: relayed, or matched and not opened (not migrated yet).", []string{"state"}, nil)
	return collectorFunc{desc: desc, collect: func(ch chan<- prometheus.Metric) {
		s.mu.Lock()
		relayed, unopened := len(s.members), len(s.unopened)
		s.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(relayed), "relayed")
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(unopened), "unopened")
	}}
}

// collectorFunc is a collector of one described metric family.
type collectorFunc struct {
	desc    *prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// TableMetrics are one table's collectors, registered labelled
// table=<name> while the table is relayed.
type TableMetrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector
}

// RegisterTable registers cs on reg, labelled table=<table>. Errors: the
// first registration's that fails, after unregistering those before it.
func RegisterTable(reg prometheus.Registerer, table string, cs []prometheus.Collector) (*TableMetrics, error) {
	m := &TableMetrics{reg: prometheus.WrapRegistererWith(prometheus.Labels{"table": table}, reg)}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			m.Unregister()
			return nil, fmt.Errorf("register its metrics: %w", err)
		}
		m.collectors = append(m.collectors, c)
	}
	return m, nil
}

// Unregister removes the table's collectors.
func (m *TableMetrics) Unregister() {
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.collectors = nil
}
