package table

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// Group is the table source over several outbox tables (database.tables):
// a Watermill message.Subscriber whose messages are those of one
// Subscriber per table, all of them over the relay's one database pool
// (outbox.SessionsMax sessions, however many tables) and emitting on one
// channel to the one forwarder, one NATS connection. The tables share one
// in-flight budget (Budget) and take turns to claim.
//
// The patterns configured are resolved again every refresh
// (outbox.DB.ResolveTables): a table matched since is opened and relayed,
// one no longer matched is let go (its claims stop, its rows in flight
// drain and their marks are written, as at shutdown). A table matched that
// cannot be opened (not migrated yet) is named by readiness and tried again
// at the next refresh; the other tables go on.
type Group struct {
	db      *outbox.DB
	names   []string
	refresh time.Duration
	budget  *Budget
	prober  *Prober
	build   func(ctx context.Context, store *outbox.Store) (*memberParts, func(), error)
	reg     prometheus.Registerer
	logger  *slog.Logger

	// Refreshed receives the tables relayed after each resolution, sorted.
	Refreshed *source.TestSignal[[]string]
	// Signals are given to every table's subscriber as it starts (set them
	// before Subscribe; one signal is shared by all the tables).
	Signals Signals

	mu        sync.Mutex
	members   map[string]*member // by outbox.DB.FoldName
	unopened  map[string]string  // tables matched that could not be opened → why
	inherited map[string]*memberParts
	leaving   sync.WaitGroup // members being let go
	initial   []*outbox.Store

	out        chan *message.Message
	refreshNow chan struct{} // a table turned out missing (kick)
	closing    chan struct{}
	closeOnce  sync.Once
	done       chan struct{}
	subscribed atomic.Bool
}

var _ message.Subscriber = (*Group)(nil)

// memberParts are what one table of a Group is built of (buildMember).
type memberParts struct {
	Store      *outbox.Store
	Subscriber *Subscriber
	Stall      *source.StallWatch
	Table      *outbox.TableCollector
	Reconciler *dedup.Reconciler
}

// member is one table of a running Group.
type member struct {
	*memberParts
	cleanup    func()
	reg        prometheus.Registerer
	collectors []prometheus.Collector
	stop       context.CancelFunc
	stallDone  chan struct{}
}

// GroupConfig configures a Group.
type GroupConfig struct {
	// Names are the tables and patterns configured (database.tables).
	Names []string
	// Refresh is how often the patterns are resolved again
	// (database.tables_refresh).
	Refresh time.Duration
	// Budget is shared by the tables' subscribers.
	Budget *Budget
	// Prober is their one wake-up (nil: each polls on its own), run while
	// the group is subscribed.
	Prober *Prober
	// Build builds one table's parts over its store.
	Build func(ctx context.Context, store *outbox.Store) (*memberParts, func(), error)
	// Registerer receives each table's metrics, labelled table=<name>,
	// while the table is relayed.
	Registerer prometheus.Registerer
}

// NewGroup returns a Group that relays stores (the tables resolved at
// start) and, from each refresh on, the tables db then matches; unopened
// are the tables matched at start that could not be opened, with why.
func NewGroup(db *outbox.DB, stores []*outbox.Store, unopened map[string]string, logger *slog.Logger, cfg GroupConfig) *Group {
	if unopened == nil {
		unopened = map[string]string{}
	}
	return &Group{
		db: db, names: cfg.Names, refresh: cfg.Refresh, budget: cfg.Budget, prober: cfg.Prober, build: cfg.Build, reg: cfg.Registerer,
		logger:     logger.With(slog.String("component", "outbox")),
		members:    map[string]*member{},
		unopened:   unopened,
		initial:    stores,
		refreshNow: make(chan struct{}, 1),
		closing:    make(chan struct{}),
		done:       make(chan struct{}),
	}
}

// Budget is the in-flight budget the tables share.
func (g *Group) Budget() *Budget { return g.budget }

// kick makes the group resolve its tables again now: a claim found its
// table missing (dropped), which the next refresh would let go anyway.
func (g *Group) kick() {
	select {
	case g.refreshNow <- struct{}{}:
	default:
	}
}

// Subscribe starts relaying every table and returns the channel of their
// messages, closed after ctx ends or Close is called and every table's
// subscriber closed. Errors: source.ErrClosed; an error when called twice.
func (g *Group) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	if source.Closed(g.closing) {
		return nil, source.ErrClosed
	}
	if !g.subscribed.CompareAndSwap(false, true) {
		return nil, errors.New("outbox group: Subscribe called twice")
	}
	g.out = make(chan *message.Message)
	g.mu.Lock()
	initial := g.initial
	g.initial = nil
	g.mu.Unlock()
	for _, store := range initial {
		g.add(ctx, store)
	}
	g.signalRefreshed()
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		g.refreshLoop(ctx)
	}()
	probing, stopProbing := context.WithCancel(context.WithoutCancel(ctx))
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		var weighing sync.WaitGroup
		if g.budget != nil {
			weighing.Go(func() { g.budget.Weigh(probing, g.db, g.logger) })
		}
		if g.prober != nil {
			g.prober.Run(probing)
		}
		weighing.Wait()
	}()
	go func() {
		select {
		case <-ctx.Done():
			g.beginClose()
		case <-g.closing:
		}
		<-refreshed
		stopProbing() // the subscribers' claims stop next; a parked one waits for nothing
		<-probed
		g.mu.Lock()
		members := g.members
		g.members = map[string]*member{}
		if g.inherited == nil {
			g.inherited = map[string]*memberParts{}
		}
		for key, m := range members { // for the group of the next relay (Inherit)
			g.inherited[key] = m.memberParts
		}
		g.mu.Unlock()
		for _, m := range members {
			g.letGo(m)
		}
		g.leaving.Wait()
		close(g.out)
		close(g.done)
	}()
	return g.out, nil
}

// Close stops every table's claims, drains them (as Subscriber.Close) and
// closes the message channel. It is idempotent.
func (g *Group) Close() error {
	g.beginClose()
	if g.subscribed.Load() {
		<-g.done
	}
	return nil
}

func (g *Group) beginClose() { g.closeOnce.Do(func() { close(g.closing) }) }

// Tables are the tables relayed now, sorted.
func (g *Group) Tables() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tablesLocked()
}

func (g *Group) tablesLocked() []string {
	out := make([]string, 0, len(g.members)+len(g.initial))
	for _, m := range g.members {
		out = append(out, m.Store.Table())
	}
	for _, s := range g.initial { // before Subscribe
		out = append(out, s.Table())
	}
	slices.Sort(out)
	return out
}

// running are the tables relayed now, in no order.
func (g *Group) running() []*member {
	g.mu.Lock()
	defer g.mu.Unlock()
	members := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		members = append(members, m)
	}
	return members
}

// Prober is the group's one wake-up of its idle tables; nil where the
// database has no claim probe (SQLite), whose tables each poll.
func (g *Group) Prober() *Prober { return g.prober }

// Each calls f with each table relayed now and its subscriber, in the
// order of the tables' names.
func (g *Group) Each(f func(table string, sub *Subscriber)) {
	members := g.running()
	slices.SortFunc(members, func(a, b *member) int { return strings.Compare(a.Store.Table(), b.Store.Table()) })
	for _, m := range members {
		f(m.Store.Table(), m.Subscriber)
	}
}

func (g *Group) signalRefreshed() { g.Refreshed.Signal(g.Tables()) }

// refreshLoop resolves the patterns again every refresh until closing.
func (g *Group) refreshLoop(ctx context.Context) {
	t := time.NewTicker(g.refresh)
	defer t.Stop()
	for {
		select {
		case <-g.closing:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.refreshNow:
			t.Reset(g.refresh)
		}
		g.resolve(ctx)
		g.signalRefreshed()
	}
}

// resolveTimeoutMin is the shortest time a refresh is given to list the
// tables and open the new ones.
const resolveTimeoutMin = 30 * time.Second

// resolve matches the patterns again: it relays the tables matched since
// and lets go of those no longer matched.
func (g *Group) resolve(ctx context.Context) {
	// MariaDB lists tables slowly while it is busy (information_schema
	// opens each table's definition): more than 5 s over 150 tables in a
	// test. A slow listing delays only the next refresh.
	rctx, cancel := context.WithTimeout(ctx, max(g.refresh, resolveTimeoutMin))
	defer cancel()
	tables, _, err := g.db.ResolveTables(rctx, g.names)
	if err != nil {
		g.logger.Warn("outbox tables not resolved again; relaying those resolved before", slog.Any("error", err), slog.Duration("retry_in", g.refresh))
		return
	}
	want := map[string]string{}
	for _, t := range tables {
		want[g.db.FoldName(t)] = t
	}
	g.mu.Lock()
	var gone []*member
	for key, m := range g.members {
		if _, ok := want[key]; !ok {
			gone = append(gone, m)
			delete(g.members, key)
		}
	}
	for key := range g.unopened {
		if _, ok := want[key]; !ok {
			delete(g.unopened, key)
		}
	}
	var added []string
	for key, t := range want {
		if _, ok := g.members[key]; !ok {
			added = append(added, t)
		}
	}
	g.mu.Unlock()
	for _, m := range gone {
		g.logger.Info("outbox table let go: no longer matched", slog.String("table", m.Store.Table()))
		g.letGo(m)
	}
	slices.Sort(added)
	for _, t := range added {
		store, err := outbox.OpenStore(rctx, g.db, t, g.logger)
		if err != nil {
			g.setUnopened(t, err)
			continue
		}
		g.add(ctx, store)
	}
}

// setUnopened records why table could not be opened, logging it the first
// time it is seen or when the reason changed.
func (g *Group) setUnopened(table string, err error) {
	key, why := g.db.FoldName(table), err.Error()
	g.mu.Lock()
	prev, seen := g.unopened[key]
	g.unopened[key] = why
	g.mu.Unlock()
	if !seen || prev != why {
		g.logger.Warn("outbox table matched and not relayed: it cannot be opened; trying again at each refresh",
			slog.String("table", table), slog.Any("error", err), slog.Duration("refresh", g.refresh))
	}
}

// add builds and starts the relay of one table. A table whose parts
// cannot be built or whose metrics cannot be registered is recorded as
// unopened.
func (g *Group) add(ctx context.Context, store *outbox.Store) {
	table := store.Table()
	parts, cleanup, err := g.build(ctx, store)
	if err != nil {
		g.setUnopened(table, err)
		return
	}
	m := &member{memberParts: parts, cleanup: cleanup, stallDone: make(chan struct{})}
	key := g.db.FoldName(table)
	g.mu.Lock()
	prev := g.inherited[key]
	g.mu.Unlock()
	if prev != nil {
		m.Subscriber.Inherit(prev.Subscriber)
		m.Stall.Inherit(prev.Stall)
		m.Table.Inherit(prev.Table)
		m.Reconciler.Inherit(prev.Reconciler)
	}
	m.reg = prometheus.WrapRegistererWith(prometheus.Labels{"table": table}, g.reg)
	for _, c := range append(append(m.Subscriber.Collectors(), m.Table, m.Stall.Collector()), m.Reconciler.Collectors()...) {
		if err := m.reg.Register(c); err != nil {
			m.unregister()
			cleanup()
			g.setUnopened(table, fmt.Errorf("register its metrics: %w", err))
			return
		}
		m.collectors = append(m.collectors, c)
	}
	m.Subscriber.Signals = g.Signals
	g.budget.join(m.Subscriber)
	mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	m.stop = stop
	m.Subscriber.start(mctx, g.out, false)
	go func() {
		defer close(m.stallDone)
		m.Stall.Run(mctx)
	}()
	g.mu.Lock()
	g.members[key] = m
	delete(g.unopened, key)
	g.mu.Unlock()
	g.logger.Debug("outbox table relayed", slog.String("table", table))
}

// letGo stops one table's relay in the background: its claims stop, its
// rows in flight drain, its marks are written; then its metrics go.
func (g *Group) letGo(m *member) {
	g.leaving.Add(1)
	go func() {
		defer g.leaving.Done()
		m.stop()
		_ = m.Subscriber.Close()
		<-m.stallDone
		g.budget.leave(m.Subscriber)
		if g.prober != nil {
			g.prober.unpark(m.Subscriber)
		}
		m.unregister()
		m.cleanup()
	}()
}

func (m *member) unregister() {
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.collectors = nil
}

// Inherit takes over, table by table, what prev (the group of the relay
// this process ran before) counted: each table relayed again goes on from
// its counters, its stall and its last counts. Call it before Subscribe.
func (g *Group) Inherit(prev *Group) {
	prev.mu.Lock()
	parts := map[string]*memberParts{}
	for key, p := range prev.inherited {
		parts[key] = p
	}
	for key, m := range prev.members {
		parts[key] = m.memberParts
	}
	prev.mu.Unlock()
	g.mu.Lock()
	g.inherited = parts
	g.mu.Unlock()
}

// Ready reports the tables' claims and settlement writes
// (Subscriber.Ready) and the tables matched that cannot be opened: an
// error when every table fails, health.Degraded naming those that fail
// when others relay (their rows are not helped by failing readiness), and
// Degraded while no table is matched at all.
func (g *Group) Ready(ctx context.Context) error {
	members := g.running()
	g.mu.Lock()
	var failing []string
	for key, why := range g.unopened {
		failing = append(failing, key+": "+why)
	}
	total := len(members) + len(g.unopened)
	g.mu.Unlock()
	for _, m := range members {
		if err := m.Subscriber.Ready(ctx); err != nil {
			failing = append(failing, m.Store.Table()+": "+err.Error())
		}
	}
	if total == 0 {
		return health.Degraded(fmt.Errorf("no outbox table matches %s yet (resolved again every database.tables_refresh, %s)", strings.Join(g.names, ", "), g.refresh))
	}
	return source.TablesReady(total, failing, nil)
}

// Alive fails when a table's stall watch does (StallWatch.Alive: the
// relay stuck in itself, which a restart heals), naming the table.
func (g *Group) Alive(ctx context.Context) error {
	var errs []error
	for _, m := range g.running() {
		if err := m.Stall.Alive(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Store.Table(), err))
		}
	}
	return errors.Join(errs...)
}

// Collector exposes the gauge bridge_outbox_tables{state}: the tables
// relayed (state="relayed") and those matched that cannot be opened
// (state="unopened").
func (g *Group) Collector() prometheus.Collector {
	desc := prometheus.NewDesc("bridge_outbox_tables", "Outbox tables of database.tables: relayed, or matched and not opened (not migrated yet).", []string{"state"}, nil)
	return collectorFunc{desc: desc, collect: func(ch chan<- prometheus.Metric) {
		g.mu.Lock()
		relayed, unopened := len(g.members), len(g.unopened)
		g.mu.Unlock()
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
