package table

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/telemetry"
)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Owner names this relay in the owner column of the rows it leases.
	// Required.
	Owner string
	// BatchSize is the most rows one claim takes. Defaults to 500.
	BatchSize int
	// MaxInFlight bounds the messages emitted and not yet settled. Defaults
	// to 2000.
	MaxInFlight int
	// MaxInFlightBytes bounds, in bytes, what the rows claimed and not yet
	// settled hold in memory: their payloads and headers. A claim stops
	// before the row that would pass it, and takes none while the bound is
	// reached; below it, a claim takes at least one row, so that a row
	// larger than the bound is relayed too: what is held may pass the
	// bound by one row. Defaults to 32 MiB.
	MaxInFlightBytes int64
	// MaxPayload, when set, returns the NATS server's max_payload in bytes
	// (nats.Conn.MaxPayload), or 0 when unknown. A row whose payload cannot
	// fit it with the relay's headers is claimed without its payload, which
	// the relay never reads, and becomes a dead letter (permanent_failed)
	// from its length alone. Defaults to nil: payloads are always read, and
	// the NATS client refuses those over the limit.
	MaxPayload func() int64
	// PollInterval is the longest wait after a claim that found fewer rows
	// than it asked for: the wait after a claim that took rows is
	// PollFloor, and grows by half after each claim that took none, up to
	// PollInterval (see nextPoll). A settled row or Wake ends the wait
	// early. Defaults to 250ms.
	PollInterval time.Duration
	// InflightTimeout is the lease length: in_flight rows older than this
	// are requeued by in-flight recovery (the rescuer), which runs when the
	// subscriber starts and then every RescueInterval. Defaults to 30s.
	InflightTimeout time.Duration
	// RescueInterval is how often in-flight recovery runs: a lease that
	// ended is requeued within about InflightTimeout + RescueInterval.
	// Defaults to a tenth of InflightTimeout, between 100ms and 5s (3s
	// for the default InflightTimeout).
	RescueInterval time.Duration
	// AckDeadline is how long an emitted message may stay neither acked nor
	// nacked; then it is settled as a retryable failure. Must be shorter
	// than InflightTimeout. Defaults to 20s.
	AckDeadline time.Duration
	// MaxAttempts is the number of attempts after which a retryable failure
	// becomes permanent_failed. Defaults to 20.
	MaxAttempts int
	// BackoffInitial and BackoffMax bound the exponential backoff (with
	// jitter) of retryable failures. Default to 1s and 5m.
	BackoffInitial, BackoffMax time.Duration
	// DeleteOnRelay deletes a row at its PubAck instead of marking it done.
	// Defaults to false.
	DeleteOnRelay bool
	// Retention, when set, runs retention while the subscriber runs: done
	// rows older than it (database clock) are deleted, every tenth of it
	// (between 1s and 1m). Defaults to 0: done rows are kept.
	Retention time.Duration
	// Namespace prefixes every Nats-Msg-Id (see outbox.MsgID). Defaults to "".
	Namespace string
	// DrainTimeout bounds how long Close waits for emitted messages to be
	// acked or nacked; the rest are released (failed, claimable at once,
	// attempt refunded). Defaults to 20s.
	DrainTimeout time.Duration
	// HoldBack is how long a row whose publish failed with class Held
	// waits before it is claimed again; its attempt is not counted.
	// Defaults to 15s.
	HoldBack time.Duration
	// CanClaim, when set, is asked before every claim; while it returns
	// false nothing is claimed (the relay's network probe). Defaults to nil:
	// always claim.
	CanClaim func() bool
	// Reconciler, when set, is asked about every row claimed more than once
	// whether its earlier publish may be stored beyond the stream's
	// duplicate window; such rows are looked up in the stream first, and
	// those found are settled as relayed without publishing. Defaults to
	// nil: rows are republished and deduplicated within the window only.
	Reconciler Reconciler
	// Budget, when set, is the in-flight budget the subscriber shares with
	// the other tables of one relay (NewBudget): each claim takes at most
	// this table's share of it, and waits its turn behind the other
	// tables' claims; MaxInFlight and MaxInFlightBytes are then unused.
	// Defaults to nil: the subscriber's own MaxInFlight and
	// MaxInFlightBytes.
	Budget *Budget
	// Prober, when set, is the one wake-up of the tables of a relay: after
	// a claim that was not full the subscriber waits for it (or for a
	// settlement, or parkedClaimSpan poll intervals) instead of probing
	// its table itself. Defaults to nil: the subscriber probes (MayClaim) and
	// polls on its own.
	Prober *Prober
	// OnMissingTable, when set, is called when a claim fails because the
	// table or its schema does not exist (outbox.IsMissingTable): a Group
	// then resolves its tables again at once, and lets a dropped table go.
	// Defaults to nil.
	OnMissingTable func()
	// Tracer records an "outbox claim" span for every row whose headers
	// carry a W3C traceparent, as a child of that trace, and puts the trace
	// into the message's context. Defaults to a no-op tracer.
	Tracer trace.Tracer
}

func (c *SubscriberConfig) setDefaults() {
	c.BatchSize = cmp.Or(c.BatchSize, config.BatchSizeDefault)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, config.MaxInFlightDefault)
	c.MaxInFlightBytes = cmp.Or(c.MaxInFlightBytes, int64(config.MaxInFlightBytesDefault))
	c.PollInterval = cmp.Or(c.PollInterval, config.PollIntervalDefault)
	c.InflightTimeout = cmp.Or(c.InflightTimeout, config.InflightTimeoutDefault)
	c.RescueInterval = cmp.Or(c.RescueInterval, RescueIntervalFor(c.InflightTimeout))
	c.AckDeadline = cmp.Or(c.AckDeadline, config.AckDeadlineDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, config.MaxAttemptsDefault)
	c.BackoffInitial = cmp.Or(c.BackoffInitial, config.BackoffInitialDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, config.BackoffMaxDefault)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, source.DrainTimeoutDefault)
	c.HoldBack = cmp.Or(c.HoldBack, source.HoldBackDefault)
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider().Tracer("")
	}
}

func (c *SubscriberConfig) validate() error {
	switch {
	case c.Owner == "":
		return fmt.Errorf("%w: Owner: must not be empty", config.ErrInvalid)
	case c.BatchSize < 1:
		return fmt.Errorf("%w: BatchSize: %d: must be at least 1", config.ErrInvalid, c.BatchSize)
	case c.MaxInFlight < 1:
		return fmt.Errorf("%w: MaxInFlight: %d: must be at least 1", config.ErrInvalid, c.MaxInFlight)
	case c.MaxInFlightBytes < 1:
		return fmt.Errorf("%w: MaxInFlightBytes: %d: must be at least 1", config.ErrInvalid, c.MaxInFlightBytes)
	case c.AckDeadline >= c.InflightTimeout:
		return fmt.Errorf("%w: AckDeadline: %s: must be shorter than InflightTimeout (%s)", config.ErrInvalid, c.AckDeadline, c.InflightTimeout)
	case c.BackoffInitial > c.BackoffMax:
		return fmt.Errorf("%w: BackoffInitial: %s: must not exceed BackoffMax (%s)", config.ErrInvalid, c.BackoffInitial, c.BackoffMax)
	case c.RescueInterval < 0:
		return fmt.Errorf("%w: RescueInterval: %s: must not be negative", config.ErrInvalid, c.RescueInterval)
	case c.Retention < 0:
		return fmt.Errorf("%w: Retention: %s: must not be negative", config.ErrInvalid, c.Retention)
	}
	return nil
}

// Counters are running totals of a Subscriber, safe to read at any time.
type Counters struct {
	Relayed      atomic.Int64 // rows marked done (or deleted) after a PubAck
	Deduplicated atomic.Int64 // of those, PubAcks with Duplicate set
	Failed       atomic.Int64 // retryable failures recorded
	Dead         atomic.Int64 // rows moved to permanent_failed
	Released     atomic.Int64 // rows given back unsettled: shutdown, NATS unavailable
	Held         atomic.Int64 // rows held back by their destination, attempt not counted
	Requeued     atomic.Int64 // rows moved by in-flight recovery
	Fenced       atomic.Int64 // marks that matched no row: the lease was lost
	Claimed      atomic.Int64 // rows claimed
}

// add adds prev's totals to c.
func (c *Counters) add(prev *Counters) {
	for _, p := range []struct{ to, from *atomic.Int64 }{
		{&c.Relayed, &prev.Relayed}, {&c.Deduplicated, &prev.Deduplicated}, {&c.Failed, &prev.Failed},
		{&c.Dead, &prev.Dead}, {&c.Released, &prev.Released}, {&c.Held, &prev.Held},
		{&c.Requeued, &prev.Requeued}, {&c.Fenced, &prev.Fenced}, {&c.Claimed, &prev.Claimed},
	} {
		p.to.Add(p.from.Load())
	}
}

// Subscriber is a Watermill message.Subscriber over an outbox table. One
// Subscribe call per Subscriber; the topic is informational (the table).
//
// It claims rows in ticks (a claim of up to BatchSize rows while fewer
// than MaxInFlight messages are unsettled and they hold less than
// MaxInFlightBytes), emits one message per row, and settles each row when
// its message is acked (done) or nacked or past AckDeadline (failed or
// permanent_failed). Its jobs are services (service.go), started by
// Subscribe and stopped as it closes: the claimer runs the claim loop
// (claimer.go), the completer writes the settlements in batches
// (settle.go), the rescuer requeues expired leases (rescuer.go) and
// retention deletes old done rows (retention.go).
type Subscriber struct {
	store  *outbox.Store
	cfg    SubscriberConfig
	logger *slog.Logger

	// Counters are the subscriber's running totals.
	Counters Counters
	// Signals are the moments of its loops a test can wait for.
	Signals Signals

	// outstanding counts the rows claimed and not yet settled (their marks
	// written), outstandingBytes what they take in memory (outbox.Row.size).
	outstanding      atomic.Int64
	outstandingBytes atomic.Int64
	wake             chan struct{}
	settleCh         chan settlement // what settle queues for the settle loop
	settleStop       chan struct{}   // closed by completer.Stop: the loop writes what is queued and returns
	settleEnded      chan struct{}   // closed when the settle loop returned
	doneBuf          []outbox.Done   // the settle loop's, reused by every flush
	tableGone        atomic.Bool     // a write found the table gone (logged once)

	// marks is the recent record of the settlement writes, for readiness
	// (the claims' is the claimer's).
	marks source.LoopHealth

	// claimer runs the claim loop; completer writes settlements;
	// maintenance are the services that run while claims do: the rescuer,
	// and retention when configured.
	claimer     *claimer
	completer   *completer
	rescuer     *rescuer
	maintenance []source.Service
	retention   *source.Retention // among maintenance, when configured

	drainExpiry <-chan time.Time

	closing      chan struct{}
	drainExpired chan struct{}
	done         chan struct{}
	closeOnce    sync.Once
	subscribed   atomic.Bool

	// hardCtx is the context of emitted messages and of settlement writes;
	// it ends only when a drain gives up.
	hardCtx    context.Context
	hardCancel context.CancelFunc
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber over store. The config is copied;
// zero fields take their defaults. Errors: "invalid config: <field>: <why>".
func NewSubscriber(store *outbox.Store, logger *slog.Logger, cfg SubscriberConfig) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	hardCtx, hardCancel := context.WithCancel(context.Background())
	s := &Subscriber{
		store:        store,
		cfg:          cfg,
		logger:       logger.With(slog.String("component", "outbox"), slog.String("table", store.Table())),
		wake:         make(chan struct{}, 1),
		settleCh:     make(chan settlement, settleQueue(cfg)),
		settleStop:   make(chan struct{}),
		settleEnded:  make(chan struct{}),
		closing:      make(chan struct{}),
		drainExpired: make(chan struct{}),
		done:         make(chan struct{}),
		hardCtx:      hardCtx,
		hardCancel:   hardCancel,
	}
	s.claimer = newClaimer(s)
	s.completer = &completer{sub: s}
	s.rescuer = newRescuer(store, &s.cfg, &s.Counters.Requeued, &s.Signals, s.logger)
	s.maintenance = []source.Service{s.rescuer}
	if cfg.Retention > 0 {
		s.retention = source.NewRetention(store, cfg.Retention, s.logger)
		s.maintenance = append(s.maintenance, s.retention)
	}
	return s, nil
}

// Signals are moments of a Subscriber's loops that a test can wait for
// instead of polling for their effect (source.TestSignal, after river's
// testsignal). Set those a test needs, enabled (source.NewTestSignal),
// before Subscribe; one signal may be shared by several subscribers. Nil
// ones, outside tests, cost a nil check.
type Signals struct {
	// Claimed receives the rows of each tick of the claim loop: 0 for a
	// tick that took nothing (the table held none claimable, the in-flight
	// window was full, or the claims wait for NATS to answer).
	Claimed *source.TestSignal[int]
	// Marked receives the settlements of each write of marks, once written
	// (statuses and Counters have moved).
	Marked *source.TestSignal[int]
	// Rescued receives the rows each run of in-flight recovery requeued.
	Rescued *source.TestSignal[int]
	// Purged receives the rows each run of retention deleted.
	Purged *source.TestSignal[int]
	// Draining receives one value as the drain begins.
	Draining *source.TestSignal[struct{}]
	// Listening receives one value each time the table source's LISTEN
	// session (PostgreSQL) starts to listen, right before it wakes the
	// claims.
	Listening *source.TestSignal[struct{}]
}

// LastClaim is when a claim last took rows (or the subscriber was made).
func (s *Subscriber) LastClaim() time.Time { return time.Unix(0, s.claimer.lastClaim.Load()) }

// Inherit takes over what prev, the subscriber of an earlier relay of this
// process, counted, and its last claim: the counters go on from its totals,
// and the time without a claim goes on from its last claim (a relay built
// again and again without claiming is still stalled). Call it before
// Subscribe.
func (s *Subscriber) Inherit(prev *Subscriber) {
	s.Counters.add(&prev.Counters)
	s.claimer.lastClaim.Store(prev.claimer.lastClaim.Load())
}

// Subscribe starts claiming and returns the channel of emitted messages. It
// is closed after ctx ends or Close is called and every emitted message was
// settled or released. Errors: source.ErrClosed; an error when called twice.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	select {
	case <-s.closing:
		return nil, source.ErrClosed
	default:
	}
	if !s.subscribed.CompareAndSwap(false, true) {
		return nil, errors.New("outbox subscriber: Subscribe called twice; one Subscriber serves one handler")
	}
	out := make(chan *message.Message)
	s.start(ctx, out, true)
	return out, nil
}

// start runs the subscriber's services, emitting on out until ctx ends or
// Close is called; then it closes out when closeOut is set (a Group's
// members share one channel, which the Group closes).
func (s *Subscriber) start(ctx context.Context, out chan *message.Message, closeOut bool) {
	// Close waits for the drain of a started subscriber; before, a
	// Group's members were not marked, and Close gave up their rows at
	// once: marks unwritten, rows in flight until their lease expired
	// (found by a saboteur: SIGTERM over many tables).
	s.subscribed.Store(true)
	s.claimer.out = out
	s.completer.Start(s.hardCtx)
	if s.retention != nil {
		s.retention.Purged = s.Signals.Purged
	}
	for _, m := range s.maintenance {
		m.Start(s.hardCtx)
	}
	s.claimer.Start(s.hardCtx)
	go func() {
		select {
		case <-ctx.Done():
			s.beginClose()
		case <-s.done:
		}
	}()
	go func() {
		defer close(s.done)
		if closeOut {
			defer close(out)
		}
		// When closing begins: the claim loop stops first, then the
		// maintenance services, the drain, and the completer last.
		<-s.closing
		s.claimer.Stop()
		for _, m := range s.maintenance {
			m.Stop()
		}
		s.drain()
		s.completer.Stop()
		s.hardCancel()
	}()
}

// Wake ends the current poll wait early, e.g. on a database notification.
func (s *Subscriber) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close stops claiming, waits up to DrainTimeout for emitted messages to be
// settled, releases the rest, flushes marks and closes the message channel.
// It is idempotent and safe to call concurrently.
func (s *Subscriber) Close() error {
	s.beginClose()
	if s.subscribed.Load() {
		<-s.done
	} else {
		s.hardCancel()
	}
	return nil
}

func (s *Subscriber) beginClose() {
	s.closeOnce.Do(func() { close(s.closing) })
}

// release gives rows that were claimed but not emitted back at once.
func (s *Subscriber) release(rows []outbox.Row) {
	for _, row := range rows {
		s.outstanding.Add(1)
		st := settled(row)
		st.err, st.refund = "released at shutdown before publishing", true
		s.settle(st)
	}
}

// drain waits for every emitted message to settle, up to DrainTimeout;
// then makes the stragglers release themselves and waits a little more for
// those writes.
func (s *Subscriber) drain() {
	s.Signals.Draining.Signal(struct{}{})
	expired := s.drainExpiry
	if expired == nil {
		timer := time.NewTimer(s.cfg.DrainTimeout)
		defer timer.Stop()
		expired = timer.C
	}
	for s.outstanding.Load() > 0 {
		select {
		case <-s.wake:
		case <-expired:
			s.logger.Warn("drain timeout: releasing unsettled rows", slog.Int64("rows", s.outstanding.Load()), slog.Duration("drain_timeout", s.cfg.DrainTimeout))
			close(s.drainExpired)
			s.waitSettled(5 * time.Second)
			return
		}
	}
}

func (s *Subscriber) waitSettled(limit time.Duration) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for s.outstanding.Load() > 0 {
		select {
		case <-s.wake:
		case <-timer.C:
			s.logger.Error("giving up on settling rows; they stay in_flight until their lease expires", slog.Int64("rows", s.outstanding.Load()))
			s.hardCancel()
			return
		}
	}
}

// backoff is the wait before attempt+1 (source.Backoff).
func (s *Subscriber) backoff(attempt int) time.Duration {
	return source.Backoff(attempt, s.cfg.BackoffInitial, s.cfg.BackoffMax)
}

// claimWindow is when the claim that took a row ran, on this process's clock.
type claimWindow struct{ start, end time.Time }

// traceClaim returns the context of a row's delivery, and whether the row
// is traced: hardCtx carrying the row's trace when its headers have a
// traceparent, in which it records the claim as a span.
func (s *Subscriber) traceClaim(row outbox.Row, headers map[string][]string, claimed claimWindow) (context.Context, bool) {
	ctx := telemetry.Parent(s.hardCtx, headers)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return s.hardCtx, false
	}
	_, span := s.cfg.Tracer.Start(ctx, "outbox claim", trace.WithTimestamp(claimed.start),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.Int64("outbox.row_id", row.ID), attribute.Int("outbox.attempt", row.Attempt),
			attribute.String("outbox.table", s.store.Table())))
	span.End(trace.WithTimestamp(claimed.end))
	return ctx, true
}
