package table

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/dedup"
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
	db     *outbox.DB
	set    *source.TableSet[*member, *memberParts]
	budget *Budget
	prober *Prober
	build  func(ctx context.Context, store *outbox.Store) (*memberParts, func(), error)
	reg    prometheus.Registerer
	logger *slog.Logger

	// Refreshed receives the tables relayed after each resolution, sorted
	// (set it before Subscribe).
	Refreshed *source.TestSignal[[]string]
	// Signals are given to every table's subscriber as it starts (set them
	// before Subscribe; one signal is shared by all the tables).
	Signals Signals

	leaving sync.WaitGroup // members being let go

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
	cleanup   func()
	metrics   *source.TableMetrics
	stop      context.CancelFunc
	stallDone chan struct{}
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
	g := &Group{
		db: db, budget: cfg.Budget, prober: cfg.Prober, build: cfg.Build, reg: cfg.Registerer,
		logger:  logger.With(slog.String("component", "outbox")),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	g.set = source.NewTableSet(db, cfg.Names, cfg.Refresh, stores, unopened, g.logger, source.TableHooks[*member, *memberParts]{
		Table: func(m *member) string { return m.Store.Table() },
		Parts: func(m *member) *memberParts { return m.memberParts },
		Add:   g.add,
		LetGo: g.letGo,
	})
	return g
}

// kick makes the group resolve its tables again now: a claim found its
// table missing (dropped), which the next refresh would let go anyway.
func (g *Group) kick() { g.set.Kick() }

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
	g.set.Refreshed = g.Refreshed
	g.set.Start(ctx)
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		g.set.RefreshLoop(ctx, g.closing)
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
		for _, m := range g.set.Close() {
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
func (g *Group) Tables() []string { return g.set.Tables() }

// Prober is the group's one wake-up of its idle tables; nil where the
// database has no claim probe (SQLite), whose tables each poll.
func (g *Group) Prober() *Prober { return g.prober }

// Each calls f with each table relayed now and its subscriber, in the
// order of the tables' names.
func (g *Group) Each(f func(table string, sub *Subscriber)) {
	for _, m := range g.set.Members() {
		f(m.Store.Table(), m.Subscriber)
	}
}

// Budget is the in-flight budget the tables share.
func (g *Group) Budget() *Budget { return g.budget }

// add builds and starts the relay of one table (later: matched by a
// refresh, after the start). A table whose parts cannot be built or whose
// metrics cannot be registered is recorded as unopened.
func (g *Group) add(ctx context.Context, store *outbox.Store, later bool) {
	table := store.Table()
	parts, cleanup, err := g.build(ctx, store)
	if err != nil {
		g.set.SetUnopened(table, err)
		return
	}
	metrics, err := source.RegisterTable(g.reg, table, append(append(parts.Subscriber.Collectors(), parts.Table, parts.Stall.Collector()), parts.Reconciler.Collectors()...))
	if err != nil {
		cleanup()
		g.set.SetUnopened(table, err)
		return
	}
	m := &member{memberParts: parts, cleanup: cleanup, metrics: metrics, stallDone: make(chan struct{})}
	admitted := g.set.Admit(table, m, func(prev *memberParts, ok bool) {
		if ok {
			m.Subscriber.Inherit(prev.Subscriber)
			m.Stall.Inherit(prev.Stall)
			m.Table.Inherit(prev.Table)
			m.Reconciler.Inherit(prev.Reconciler)
		}
	})
	if !admitted {
		metrics.Unregister()
		cleanup()
		return
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
	level := slog.LevelDebug // at start: the relay's start line counts them
	if later {
		level = slog.LevelInfo // a table that joined: a new tenant
	}
	g.logger.Log(ctx, level, "outbox table relayed", slog.String("table", table))
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
		m.metrics.Unregister()
		m.cleanup()
	}()
}

// Inherit takes over, table by table, what prev (the group of the relay
// this process ran before) counted: each table relayed again goes on from
// its counters, its stall and its last counts. Call it before Subscribe.
func (g *Group) Inherit(prev *Group) { g.set.Inherit(prev.set) }

// Ready reports the tables' claims and settlement writes
// (Subscriber.Ready) and the tables matched that cannot be opened: an
// error when every table fails, health.Degraded naming those that fail
// when others relay (their rows are not helped by failing readiness), and
// Degraded while no table is matched at all.
func (g *Group) Ready(ctx context.Context) error {
	return g.set.Ready(ctx, func(ctx context.Context, m *member) error { return m.Subscriber.Ready(ctx) })
}

// Alive fails when a table's stall watch does (StallWatch.Alive: the
// relay stuck in itself, which a restart heals), naming the table.
func (g *Group) Alive(ctx context.Context) error {
	return g.set.Alive(ctx, func(ctx context.Context, m *member) error { return m.Stall.Alive(ctx) })
}

// Collector exposes the gauge bridge_outbox_tables{state} (see
// source.TableSet.Collector).
func (g *Group) Collector() prometheus.Collector { return g.set.Collector() }
