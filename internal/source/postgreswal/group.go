package postgreswal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	set       *source.TableSet[*member, *memberParts]
	stream    *slotStream
	retention time.Duration
	build     func(ctx context.Context, store *outbox.Store) (*memberParts, func(), error)
	reg       prometheus.Registerer
	logger    *slog.Logger

	// Refreshed receives the tables relayed after each resolution, sorted
	// (set it before Subscribe).
	Refreshed *source.TestSignal[[]string]
	// Signals are given to every table's subscriber as it starts (set them
	// before Subscribe; one signal is shared by all the tables).
	Signals struct{ Marked *source.TestSignal[int] }

	serving sync.WaitGroup // tables whose pipelines have not written their last marks
	leaving sync.WaitGroup // tables being let go

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
	forwarded <-chan struct{} // its messages all went to the group's channel
	services  <-chan struct{} // its stall watch and retention returned
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
	g := &Group{
		db: db, stream: stream, retention: cfg.Retention, build: cfg.Build, reg: cfg.Registerer,
		logger:  logger.With(slog.String("component", "postgres-wal"), slog.String("slot", stream.cfg.Slot)),
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
	g.set.Refreshed = g.Refreshed
	g.set.Start(ctx)
	readerDone := goDone(g.stream.loop)
	refreshed := goDone(func() { g.set.RefreshLoop(ctx, g.closing) })
	go func() {
		select {
		case <-ctx.Done():
			g.beginClose()
		case <-g.closing:
		}
		<-refreshed
		members := g.set.Close()
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
func (g *Group) Tables() []string { return g.set.Tables() }

// Each calls f with each table relayed now and its subscriber, in the
// order of the tables' names.
func (g *Group) Each(f func(table string, sub *Subscriber)) {
	for _, m := range g.set.Members() {
		f(m.Store.Table(), m.Subscriber)
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
		g.set.SetUnopened(table, err)
		return
	}
	metrics, err := source.RegisterTable(g.reg, table, append(append(parts.Subscriber.Collectors(), parts.Table, parts.Stall.Collector()), parts.Reconciler.Collectors()...))
	if err != nil {
		cleanup()
		g.set.SetUnopened(table, err)
		return
	}
	m := &member{memberParts: parts, cleanup: cleanup, metrics: metrics}
	admitted := g.set.Admit(table, m, func(prev *memberParts, ok bool) {
		if ok {
			m.Subscriber.Inherit(prev.Subscriber)
			m.Stall.Inherit(prev.Stall)
			m.Table.Inherit(prev.Table)
			m.Reconciler.Inherit(prev.Reconciler)
		}
		g.serving.Add(1)
	})
	if !admitted {
		metrics.Unregister()
		cleanup()
		return
	}

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
	level := slog.LevelDebug // at start: the relay's start line counts them
	if later {
		level = slog.LevelInfo // a table that joined: a new tenant
	}
	g.logger.Log(ctx, level, "outbox table relayed", slog.String("table", table))
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
	m.metrics.Unregister()
	m.cleanup()
}

// Inherit takes over, table by table, what prev (the group of the relay
// this process ran before) counted: each table relayed again goes on from
// its counters, its stall and its last counts. Call it before Subscribe.
func (g *Group) Inherit(prev *Group) { g.set.Inherit(prev.set) }

// Ready is the readiness of the replication stream and of each table: an
// error while the stream does not run (as Subscriber.Ready) or every table
// fails; health.Degraded naming the tables that fail (their publication
// fault, with the fix) or, while the stream runs, have rows set aside while
// others relay, and while this relay is a standby.
func (g *Group) Ready(ctx context.Context) error {
	st := g.stream.state.Load()
	if !st.streaming && !st.standby {
		return fmt.Errorf("replication slot %s: not streaming: %w", g.stream.cfg.Slot, st.err)
	}
	err := g.set.Ready(ctx, func(ctx context.Context, m *member) error {
		err := m.Subscriber.Ready(ctx)
		if health.IsDegraded(err) && !st.streaming {
			return nil // a standby's tables: the standby says it
		}
		return err
	})
	if st.standby && (err == nil || health.IsDegraded(err)) {
		standby := fmt.Errorf("standby: replication slot %s is held by %s; this relay waits for it", g.stream.cfg.Slot, st.holder)
		return health.Degraded(errors.Join(standby, err))
	}
	return err
}

// Alive fails when a table's stall watch does (StallWatch.Alive), naming
// the table.
func (g *Group) Alive(ctx context.Context) error {
	return g.set.Alive(ctx, func(ctx context.Context, m *member) error { return m.Stall.Alive(ctx) })
}

// Collector exposes the gauge bridge_outbox_tables{state} (see
// source.TableSet.Collector).
func (g *Group) Collector() prometheus.Collector { return g.set.Collector() }
