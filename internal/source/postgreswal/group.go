package postgreswal

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

// Group is the postgres-wal source over several outbox tables
// (database.tables): one replication slot and one publication that lists
// the tables, read by one replication connection (slotStream), and a
// Subscriber per table with its own pipeline, marks, sweep, rows set
// aside, stall watch and metrics (labelled table), all emitting on one
// channel to the one forwarder. The slot's position is confirmed past a
// transaction once every table's rows of it and before it are settled, so
// a table whose rows wait holds the slot's WAL, and rows of one table never
// wait for another's: a failure of a row's own sets it aside (aside.go),
// and the rows after it, of every table, go on.
//
// The patterns are resolved again every refresh: a table matched since is
// relayed from then on (its first sweep at once publishes the rows
// committed before: the reader passed them by), one no longer matched is
// let go (its rows in flight drain and are marked; its rows read after
// that stay pending in it). A table the relay relays that the publication
// does not list makes readiness name it with the fix (`bridge migrate`).
type Group struct {
	db        *outbox.DB
	stream    *slotStream
	names     []string
	refresh   time.Duration
	retention time.Duration
	build     func(ctx context.Context, store *outbox.Store) (*memberParts, func(), error)
	reg       prometheus.Registerer
	logger    *slog.Logger

	// Refreshed receives the tables relayed after each resolution, sorted.
	Refreshed *source.TestSignal[[]string]
	// Signals are given to every table's subscriber as it starts (set them
	// before Subscribe; one signal is shared by all the tables).
	Signals struct{ Marked *source.TestSignal[int] }

	mu        sync.Mutex
	members   map[string]*member // by outbox.DB.FoldName
	unopened  map[string]string  // tables matched that could not be opened → why
	inherited map[string]*memberParts
	initial   []*outbox.Store
	closed    bool           // no table is added once the group closes
	serving   sync.WaitGroup // tables whose pipelines have not written their last marks
	leaving   sync.WaitGroup // tables being let go

	out        chan *message.Message
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
	forwarded  <-chan struct{} // its messages all went to the group's channel
	services   <-chan struct{} // its stall watch and retention returned
}

// GroupConfig configures a Group.
type GroupConfig struct {
	// Names are the tables and patterns configured (database.tables).
	Names []string
	// Refresh is how often the patterns are resolved again
	// (database.tables_refresh).
	Refresh time.Duration
	// Retention is how long relayed rows are kept (relay.retention); 0:
	// no retention runs (relay.delete_on_relay).
	Retention time.Duration
	// Build builds one table's parts over its store, on the group's stream.
	Build func(ctx context.Context, store *outbox.Store) (*memberParts, func(), error)
	// Registerer receives each table's metrics, labelled table=<name>,
	// while the table is relayed.
	Registerer prometheus.Registerer
}

// NewGroup returns a Group on stream that relays stores (the tables
// resolved at start) and, from each refresh on, the tables db then
// matches; unopened are the tables matched at start that could not be
// opened, with why.
func NewGroup(db *outbox.DB, stream *slotStream, stores []*outbox.Store, unopened map[string]string, logger *slog.Logger, cfg GroupConfig) *Group {
	if unopened == nil {
		unopened = map[string]string{}
	}
	return &Group{
		db: db, stream: stream, names: cfg.Names, refresh: cfg.Refresh, retention: cfg.Retention, build: cfg.Build, reg: cfg.Registerer,
		logger:   logger.With(slog.String("component", "postgres-wal"), slog.String("slot", stream.cfg.Slot)),
		members:  map[string]*member{},
		unopened: unopened,
		initial:  stores,
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// Subscribe starts reading the slot and relaying every table, and returns
// the channel of their messages. It is closed after ctx ends or Close is
// called, once every table drained and wrote its last marks and the final
// position is confirmed. Errors: source.ErrClosed; an error when called
// twice.
func (g *Group) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	if source.Closed(g.closing) {
		return nil, source.ErrClosed
	}
	if !g.subscribed.CompareAndSwap(false, true) {
		return nil, errors.New("postgres-wal group: Subscribe called twice")
	}
	g.out = make(chan *message.Message)
	g.mu.Lock()
	initial := g.initial
	g.initial = nil
	g.mu.Unlock()
	for _, store := range initial {
		g.add(ctx, store, false)
	}
	g.Refreshed.Signal(g.Tables())
	readerDone := goDone(g.stream.loop)
	refreshed := goDone(func() { g.refreshLoop(ctx) })
	go func() {
		select {
		case <-ctx.Done():
			g.beginClose()
		case <-g.closing:
		}
		<-refreshed
		g.mu.Lock()
		g.closed = true
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
			m.Subscriber.beginClose()
		}
		// Every table's last marks are written: the reader confirms the
		// final position and stops.
		g.serving.Wait()
		close(g.stream.stop)
		<-readerDone
		for _, m := range members {
			g.finish(m, false)
		}
		g.leaving.Wait()
		close(g.out)
		close(g.done)
	}()
	return g.out, nil
}

// Close stops reading, drains every table (as Subscriber.Close), confirms
// the final position and closes the message channel. Idempotent.
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

// Each calls f with each table relayed now and its subscriber, in the
// order of the tables' names.
func (g *Group) Each(f func(table string, sub *Subscriber)) {
	members := g.running()
	slices.SortFunc(members, func(a, b *member) int { return strings.Compare(a.Store.Table(), b.Store.Table()) })
	for _, m := range members {
		f(m.Store.Table(), m.Subscriber)
	}
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
		}
		g.resolve(ctx)
		g.Refreshed.Signal(g.Tables())
	}
}

// resolve matches the patterns again: it relays the tables matched since
// and lets go of those no longer matched.
func (g *Group) resolve(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, max(g.refresh, 30*time.Second))
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
		g.add(ctx, store, true)
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

// add builds one table's subscriber, adds it to the stream and starts it.
// A table added while the stream runs (later) sweeps at once: the rows its
// producers committed before were read and passed by. A table whose parts
// cannot be built or whose metrics cannot be registered is recorded as
// unopened.
func (g *Group) add(ctx context.Context, store *outbox.Store, later bool) {
	table := store.Table()
	parts, cleanup, err := g.build(ctx, store)
	if err != nil {
		g.setUnopened(table, err)
		return
	}
	m := &member{memberParts: parts, cleanup: cleanup}
	key := g.db.FoldName(table)
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
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		m.unregister()
		cleanup()
		return
	}
	if prev := g.inherited[key]; prev != nil {
		m.Subscriber.Inherit(prev.Subscriber)
		m.Stall.Inherit(prev.Stall)
		m.Table.Inherit(prev.Table)
		m.Reconciler.Inherit(prev.Reconciler)
	}
	g.members[key] = m
	delete(g.unopened, key)
	g.serving.Add(1)
	g.mu.Unlock()

	m.Subscriber.Signals = g.Signals
	g.stream.add(m.Subscriber)
	mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	m.stop = stop
	out := make(chan *message.Message)
	m.Subscriber.serve(mctx, out, g.serving.Done)
	m.forwarded = goDone(func() {
		for msg := range out {
			g.out <- msg
		}
	})
	m.services = goDone(func() {
		retained := goDone(func() {
			if g.retention > 0 {
				source.RunRetention(mctx, m.Store, g.retention, m.Subscriber.logger)
			}
		})
		m.Stall.Run(mctx)
		<-retained
	})
	if later {
		select {
		case m.Subscriber.sweepNow <- struct{}{}:
		default:
		}
	}
	g.logger.Debug("outbox table relayed", slog.String("table", table))
}

// letGo stops one table's relay in the background: its rows in flight
// drain, its marks are written; then it leaves the stream (it no longer
// holds the slot's position) and its metrics go.
func (g *Group) letGo(m *member) {
	g.leaving.Add(1)
	go func() {
		defer g.leaving.Done()
		m.stop()
		_ = m.Subscriber.Close()
		g.finish(m, true)
	}()
}

// finish waits for a table that closed: its messages forwarded, its
// services returned; then it leaves the stream (leave) and its metrics go.
func (g *Group) finish(m *member, leave bool) {
	<-m.Subscriber.done
	<-m.forwarded
	m.stop()
	<-m.services
	if leave {
		g.stream.remove(m.Subscriber)
	}
	m.unregister()
	m.cleanup()
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

// Ready is the readiness of the replication stream and of each table: an
// error while the stream does not run (as Subscriber.Ready) or every table
// fails; health.Degraded naming the tables that fail (their publication
// fault, with the fix) or have rows set aside while others relay, and
// while this relay is a standby.
func (g *Group) Ready(ctx context.Context) error {
	st := g.stream.state.Load()
	if !st.streaming && !st.standby {
		return fmt.Errorf("replication slot %s: not streaming: %w", g.stream.cfg.Slot, st.err)
	}
	members := g.running()
	g.mu.Lock()
	var failing, degraded []string
	for key, why := range g.unopened {
		failing = append(failing, key+": "+why)
	}
	total := len(members) + len(g.unopened)
	g.mu.Unlock()
	for _, m := range members {
		switch err := m.Subscriber.Ready(ctx); {
		case err == nil:
		case health.IsDegraded(err):
			if st.streaming {
				degraded = append(degraded, m.Store.Table()+": "+err.Error())
			}
		default:
			failing = append(failing, m.Store.Table()+": "+err.Error())
		}
	}
	if total == 0 {
		return health.Degraded(fmt.Errorf("no outbox table matches %s yet (resolved again every database.tables_refresh, %s)", strings.Join(g.names, ", "), g.refresh))
	}
	err := source.TablesReady(total, failing, degraded)
	if st.standby && (err == nil || health.IsDegraded(err)) {
		standby := fmt.Errorf("standby: replication slot %s is held by %s; this relay waits for it", g.stream.cfg.Slot, st.holder)
		return health.Degraded(errors.Join(standby, err))
	}
	return err
}

// Alive fails when a table's stall watch does (StallWatch.Alive), naming
// the table.
func (g *Group) Alive(ctx context.Context) error {
	var errs []error
	for _, m := range g.running() {
		if err := m.Stall.Alive(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Store.Table(), err))
		}
	}
	return errors.Join(errs...)
}
