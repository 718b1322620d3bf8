package postgreswal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/secret"
	"github.com/outbox-bridge/bridge/internal/source"
)

// markFlushTimeout bounds the wait for the last marks at shutdown.
const markFlushTimeout = 5 * time.Second

// Counters are running totals of a Subscriber, safe to read at any time.
type Counters struct {
	Read         atomic.Int64 // rows read from the slot (again after a restart)
	Relayed      atomic.Int64 // rows marked done (or deleted) after their PubAck
	Deduplicated atomic.Int64 // of those, PubAcks with Duplicate set
	Failed       atomic.Int64 // retryable failures: the row is set aside (its own) or the queue held (NATS not answering)
	Dead         atomic.Int64 // rows made dead letters (permanent_failed)
	Unavailable  atomic.Int64 // failures while NATS was unreachable (not counted as attempts)
	Held         atomic.Int64 // rows refused for now by their stream (the guard), not counted as attempts
	Swept        atomic.Int64 // pending rows published by the sweep
	Restarts     atomic.Int64 // replication streams started again after an interruption
	Checked      atomic.Int64 // rows read again found settled in the table (check.go), not published again
	SetAside     atomic.Int64 // rows set aside (aside.go): failed for reasons of their own, or waiting for such a row of their ordering key
}

// add adds prev's totals to c's, every counter of the struct (read by
// reflection, so that a counter added later cannot be left behind).
func (c *Counters) add(prev *Counters) {
	to, from := reflect.ValueOf(c).Elem(), reflect.ValueOf(prev).Elem()
	for i := range to.NumField() {
		to.Field(i).Addr().Interface().(*atomic.Int64).Add(from.Field(i).Addr().Interface().(*atomic.Int64).Load())
	}
}

// Subscriber is a Watermill message.Subscriber over the inserts of the
// bridge table, read from PostgreSQL's write-ahead log through a logical
// replication slot (pgoutput). One Subscribe call per Subscriber; the topic
// is informational.
//
// It emits rows in commit order and hands them to the NATS client in that
// order (sink.Turn), many awaiting their PubAck at once. A row is marked
// relayed (or deleted) after its PubAck, in batches, off the delivery
// path; the slot's confirmed position moves past a transaction only once
// every row of it and before it is marked, so after a crash everything
// after that position is read and published again, and JetStream drops the
// repeats by Nats-Msg-Id.
//
// A retryable failure of the row's own (a nack: no stream, its stream
// refusing it) sets the row aside (aside.go): it is marked failed, the slot
// passes it, the rows after it go on, the later rows of its ordering key
// wait for it, and the sweep brings it back after its backoff. A failure
// of the destination (NATS unreachable, not answering, a stream without a
// leader) holds the queue: emission stops, the outcomes of the messages
// already handed to NATS are awaited, and after the wait the rows from the
// failed one on that have no PubAck are emitted again, in order. A row
// that can never be published, or that failed MaxAttempts times, is a dead
// letter (permanent_failed) and the queue moves on. A periodic sweep
// publishes pending rows that the slot will not deliver (see sweep.go).
type Subscriber struct {
	db     *outbox.DB
	store  *outbox.Store
	cfg    Config
	logger *slog.Logger
	table  qualifiedName
	// stream reads the slot for this subscriber: its own (own), or its
	// Group's, shared by the group's tables.
	stream *slotStream
	own    bool
	// q are its statements on the outbox table
	// (internal/outbox/queries/postgres/wal_*.sql).
	q outbox.WALStatements

	// Counters are the subscriber's running totals.
	Counters Counters
	// Signals are the moments a test can wait for: Marked receives the
	// rows each write of marks settled (their statuses and Counters have
	// moved). Set it (source.NewTestSignal) before Subscribe.
	Signals struct{ Marked *source.TestSignal[int] }

	events   chan []event
	outcomes chan outcome
	marks    *queue[markItem]
	settled  *queue[*entry]
	checks   *queue[checkItem]
	checked  *queue[checkResult]
	sweeps   chan sweepRequest
	sweepNow chan struct{} // a sweep round now: the backoff of a row set aside ended
	budget   *account      // its part of the stream's budget
	// asides: the rows set aside that the table held at the start
	// (loadAsides), then the pipeline's; asideSum: what Ready says of them.
	asides   *asides
	asideSum asideState
	// swept is what the last sweep found, for readiness.
	swept source.SweepHealth

	// confirmed: the slot position this table's rows allow to confirm
	// (every row of the table before it settled); the stream confirms the
	// least of its subscribers'.
	confirmed atomic.Uint64
	oldestTx  atomic.Int64           // commit time (unix ns) of the oldest unsettled row read from the slot; 0: none
	emitted   atomic.Int64           // messages awaiting their outcome
	pubFault  atomic.Pointer[string] // the publication's fault with its fix (publication.go); nil or "": none

	// What the stall watch reads (stall.go).
	progress    atomic.Int64 // unix ns: a row last settled, or a hold of the queue ended (or NewSubscriber)
	waitingNATS atomic.Bool  // the held queue waits for NATS to be connected
	// markWrites and checkReads are the records of the marker's writes and
	// the checker's reads (readiness, the stall watch, metrics).
	markWrites source.LoopHealth
	checkReads source.LoopHealth
	tableLag   atomic.Pointer[tableLag]

	closing      chan struct{}
	drainExpired chan struct{}
	done         chan struct{}
	closeOnce    sync.Once
	subscribed   atomic.Bool

	// hardCtx is the context of emitted messages and of marks; it ends
	// only when a drain gives up.
	hardCtx    context.Context
	hardCancel context.CancelFunc
}

var _ message.Subscriber = (*Subscriber)(nil)

// streamState is what readiness and logs say about the replication stream.
type streamState struct {
	streaming bool
	standby   bool   // another process holds the slot
	holder    string // standby: who holds the slot (see describeHolder)
	err       error
}

// tableLag is the age, on the database clock, of the oldest pending or
// failed row of the table, read at a time: what the slot's lag is while
// this relay does not stream (see LagSeconds).
type tableLag struct {
	age time.Duration
	at  time.Time
}

// NewSubscriber checks that the server's wal_level is logical and that the
// publication and the slot exist (ErrWALLevel, ErrNoSlot), and returns a
// Subscriber over them. The config is copied; zero fields take their
// defaults. store is the table's store (the sweep requeues rows that
// relays of source: table left in flight).
func NewSubscriber(ctx context.Context, db *outbox.DB, store *outbox.Store, logger *slog.Logger, cfg Config) (*Subscriber, error) {
	st, err := openSlotStream(ctx, db, logger, cfg)
	if err != nil {
		return nil, err
	}
	s, err := newMember(ctx, st, store, logger, cfg)
	if err != nil {
		return nil, err
	}
	s.own = true
	st.add(s)
	return s, nil
}

// openSlotStream checks the replication URL, the server's wal_level and
// that the publication and the slot exist (for cfg.Table), and returns the
// reader of the slot from its confirmed position.
func openSlotStream(ctx context.Context, db *outbox.DB, logger *slog.Logger, cfg Config) (*slotStream, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The URL's text is checked before a parser sees it, and a parse error
	// is told from the redacted URL: a parser's message about a password
	// holding '#', '?' or '/' quotes part of it (see package secret).
	if _, err := secret.CheckURL(cfg.ReplicationURL, outbox.RedactURL); err != nil {
		return nil, fmt.Errorf("%w: wal.replication_url %q: %v", outbox.ErrUnknownScheme, outbox.RedactURL(cfg.ReplicationURL), err)
	}
	repl, err := pgconn.ParseConfig(cfg.ReplicationURL)
	if err != nil {
		if _, rerr := pgconn.ParseConfig(outbox.RedactURL(cfg.ReplicationURL)); rerr != nil {
			err = rerr
		} else {
			err = errors.New("the URL does not parse with its password, and does without it")
		}
		for inner := errors.Unwrap(err); inner != nil; inner = errors.Unwrap(inner) {
			err = inner // the outermost error repeats the URL
		}
		return nil, fmt.Errorf("%w: wal.replication_url %q: %v", outbox.ErrUnknownScheme, outbox.RedactURL(cfg.ReplicationURL), err)
	}
	repl.RuntimeParams["replication"] = "database"
	if _, set := repl.RuntimeParams["application_name"]; !set {
		repl.RuntimeParams["application_name"] = cfg.SessionName
	}
	if err := Check(ctx, db, cfg.Names); err != nil {
		return nil, err
	}
	info, err := SlotStatus(ctx, db.SQL, cfg.Slot)
	if err != nil {
		return nil, err
	}
	start, err := pglogrepl.ParseLSN(info.ConfirmedLSN)
	if err != nil {
		return nil, fmt.Errorf("replication slot %s: confirmed position %q: %w", cfg.Slot, info.ConfirmedLSN, err)
	}
	return newSlotStream(db, repl, cfg, start, logger), nil
}

// newMember returns the subscriber of store's table (cfg.Table) on st,
// not yet added to it.
func newMember(ctx context.Context, st *slotStream, store *outbox.Store, logger *slog.Logger, cfg Config) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	db := st.db
	table, err := resolveTable(ctx, db.SQL, cfg.Table)
	if err != nil {
		return nil, err
	}
	q, ok := store.WALStatements()
	if !ok {
		return nil, fmt.Errorf("source: postgres-wal needs a PostgreSQL outbox table, not %s", db.Dialect())
	}
	hardCtx, hardCancel := context.WithCancel(context.Background())
	s := &Subscriber{
		db: db, store: store, cfg: cfg, table: table, q: q, stream: st,
		logger:       logger.With(slog.String("component", "postgres-wal"), slog.String("table", cfg.Table), slog.String("slot", cfg.Slot)),
		events:       make(chan []event, eventQueue),
		outcomes:     make(chan outcome, cfg.MaxInFlight),
		marks:        newQueue[markItem](),
		settled:      newQueue[*entry](),
		checks:       newQueue[checkItem](),
		checked:      newQueue[checkResult](),
		sweeps:       make(chan sweepRequest),
		sweepNow:     make(chan struct{}, 1),
		budget:       newAccount(st.budget),
		closing:      make(chan struct{}),
		drainExpired: make(chan struct{}),
		done:         make(chan struct{}),
		hardCtx:      hardCtx,
		hardCancel:   hardCancel,
	}
	if s.asides, err = s.loadAsides(ctx); err != nil {
		hardCancel()
		return nil, err
	}
	s.asideSum.Store(s.asides.summary())
	s.confirmed.Store(st.confirmed())
	s.progress.Store(time.Now().UnixNano())
	return s, nil
}

// Subscribe starts reading the slot and returns the channel of emitted
// messages. It is closed after ctx ends or Close is called, once the
// emitted messages' outcomes are in (or DrainTimeout passed), their marks
// are written and the final position is confirmed. Errors: source.ErrClosed; an
// error when called twice.
func (s *Subscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	select {
	case <-s.closing:
		return nil, source.ErrClosed
	default:
	}
	if !s.own {
		return nil, errors.New("postgres-wal subscriber: Subscribe called on a table of a Group; subscribe to the Group")
	}
	if !s.subscribed.CompareAndSwap(false, true) {
		return nil, errors.New("postgres-wal subscriber: Subscribe called twice; one Subscriber serves one handler")
	}
	out := make(chan *message.Message)
	readerDone := goDone(s.stream.loop)
	s.serve(ctx, out, func() {
		close(s.stream.stop)
		<-readerDone
	})
	return out, nil
}

// serve runs the subscriber's pipeline, marker, checker, sweeper and
// publication watch, emitting on out, until ctx ends or Close is called
// and the drain is over; then it writes the last marks, confirms what
// they settle and calls finished (the stream's final position is sent
// then), and closes out.
func (s *Subscriber) serve(ctx context.Context, out chan *message.Message, finished func()) {
	s.subscribed.Store(true)
	markerDone := goDone(s.marker().run)
	sweeperDone := goDone(s.sweeper().run)
	publicationDone := goDone(s.publicationLoop)
	checkerDone := goDone(s.checker().run)
	go func() {
		select {
		case <-ctx.Done():
			s.beginClose()
		case <-s.done:
		}
	}()
	go func() {
		defer close(s.done)
		defer close(out)
		p := &pipeline{s: s, adopt: map[int64]*entry{}, aside: s.asides}
		p.run(out)
		s.checks.close()
		<-checkerDone
		// Every outcome is in: write the last marks, confirm what they
		// settle, then let the reader send the final position and stop.
		s.marks.close()
		select {
		case <-markerDone:
		case <-time.After(markFlushTimeout):
			s.logger.Error("giving up on writing marks at shutdown; the rows after the confirmed position are published again by the next run")
			s.hardCancel()
			<-markerDone
		}
		p.settle()
		p.popSettled()
		// What it still holds of the stream's budget (rows left in its
		// window or never taken from the reader) is the stream's again.
		s.budget.close()
		finished()
		<-sweeperDone
		<-publicationDone
		s.hardCancel()
	}()
}

// Close stops reading, waits up to DrainTimeout for the emitted messages'
// outcomes, writes their marks, confirms the final position and closes the
// message channel. Idempotent and safe to call concurrently.
func (s *Subscriber) Close() error {
	s.beginClose()
	if s.subscribed.Load() {
		<-s.done
	} else {
		s.hardCancel()
	}
	return nil
}

// Ready is the readiness check of the stream: nil while it streams and its
// marks are written (an error when a write of marks, or a visibility
// check, has waited for the database longer than 5 s, or three in a row
// failed); while
// another process holds the slot (this relay is a standby), a
// health.Degraded error naming the holder: the relay is ready to take
// over, and /readyz says that it waits; otherwise why it does not stream.
func (s *Subscriber) Ready(context.Context) error {
	if fault := s.PublicationFault(); fault != "" {
		return errors.New(fault)
	}
	st := s.stream.state.Load()
	switch {
	case st.streaming:
		if err := s.writesHealth(); err != nil {
			return err
		}
		if err := s.swept.Err(); err != nil {
			return err
		}
		if text := setAsideReady(s.asideSum.Load()); text != "" {
			return health.Degraded(errors.New(text))
		}
		return nil
	case st.standby:
		return health.Degraded(fmt.Errorf("standby: replication slot %s is held by %s; this relay waits for it", s.cfg.Slot, st.holder))
	}
	return fmt.Errorf("replication slot %s: not streaming: %w", s.cfg.Slot, st.err)
}

// goDone runs f in a goroutine of its own and returns a channel closed
// once f returned.
func goDone(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return done
}

func (s *Subscriber) beginClose() { s.closeOnce.Do(func() { close(s.closing) }) }

func (s *Subscriber) isClosing() bool { return source.Closed(s.closing) }

// backoff is the wait before attempt+1 (source.Backoff).
func (s *Subscriber) backoff(attempt int) time.Duration {
	return source.Backoff(attempt, s.cfg.BackoffInitial, s.cfg.BackoffMax)
}

// LagSeconds is how far behind the slot's reader is, in seconds: while
// this relay streams, the age, on the database clock, of the oldest row
// read from the slot and not yet settled (its transaction's commit time;
// 0 when every row read is settled). While it does not (a standby, or
// waiting for the slot), the age of the oldest pending or failed row of
// the table (by id, its created_at; read every 5 s): whoever holds the
// slot, if anyone, has not relayed it.
func (s *Subscriber) LagSeconds() float64 {
	if !s.stream.state.Load().streaming {
		if l := s.tableLag.Load(); l != nil {
			return (l.age + time.Since(l.at)).Seconds()
		}
		return 0
	}
	return s.windowLag().Seconds()
}

// windowLag is the age of the oldest unsettled row read from the slot.
func (s *Subscriber) windowLag() time.Duration {
	oldest := s.oldestTx.Load()
	if oldest == 0 {
		return 0
	}
	now := time.Now().UnixNano() + s.stream.clockOffset.Load()
	return time.Duration(max(now-oldest, 0))
}

// Confirmed is the slot position the relay has confirmed (or is about to).
func (s *Subscriber) Confirmed() pglogrepl.LSN { return pglogrepl.LSN(s.confirmed.Load()) }

// watermarkPrefix is the prefix of the logical decoding messages the sweep
// writes (pg_logical_emit_message): every slot of the database reads them,
// so the prefix names the slot.
func (c Config) watermarkPrefix() string { return "outbox-bridge/" + c.Slot }

// needsOperator reports the errors of a replication session that only an
// operator can fix: the slot or the publication does not exist (undefined
// object, 42704), the slot was invalidated (object not in prerequisite
// state, 55000), no privilege or bad authorization (42501, 28xxx), no
// such database (3D000).
func needsOperator(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42704", "55000", "42501", "3D000":
		return true
	}
	return strings.HasPrefix(pgErr.Code, "28")
}
