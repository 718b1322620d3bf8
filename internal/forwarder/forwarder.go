package forwarder

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/metrics"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/daemon"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
)

// CloseTimeoutDefault bounds the router's wait for running handlers at
// shutdown: shutdown_timeout's default.
const CloseTimeoutDefault = config.ShutdownTimeoutDefault

// Config configures a Forwarder.
type Config struct {
	// CloseTimeout bounds how long Run waits, after its context ends, for
	// handlers to finish and the subscriber to drain. Defaults to 25s.
	CloseTimeout time.Duration
	// Connected reports whether the NATS connection is up. A publish that
	// fails (not permanently) while it is down is source.Unavailable: the
	// row is retried when the connection is back, without counting the
	// attempt. Defaults to nil: failures are classified by Classify alone.
	Connected func() bool
	// StreamSeen, when set, is told the subject and the stream of every
	// PubAck (the duplicate-window guard watches those streams, and learns
	// the streams of subjects the JetStream API cannot resolve). Defaults to
	// nil.
	StreamSeen func(subject, stream string)
	// Admit, when set, is asked before every publish; an error stops that
	// publish, and the row is held back (source.Held: failed with the error
	// as last_error, the attempt not counted, tried again later) — the
	// duplicate-window guard refusing an unsafe stream. Defaults to nil.
	Admit func(ctx context.Context, subject string) error
	// Diagnose, when set, is given every failed publish with its subject,
	// and returns the error to report: a *broker.StreamUnavailableError when
	// the failure is the broker's outage (broker.Keeper.Diagnose). Defaults
	// to nil.
	Diagnose func(ctx context.Context, subject string, err error) error
	// StreamMissing, when set, is told the subject of every publish that
	// found no stream (the relay's streams are created again when lost).
	// Defaults to nil.
	StreamMissing func(ctx context.Context, subject string)
	// Registerer, when set, receives bridge_publish_duration_seconds and
	// Watermill's router metrics (namespace "watermill"). Defaults to nil:
	// no metrics.
	Registerer prometheus.Registerer
	// Tracer records a "publish" span for every message whose context
	// carries a trace (a row with a traceparent header). Defaults to a
	// no-op tracer.
	Tracer trace.Tracer
	// Stopped, when set, is called by Run once the router closed (its
	// handlers finished, or CloseTimeout passed), before Run returns: a
	// source cancels there what may still run. Defaults to nil.
	Stopped func()
}

// Forwarder connects an outbox subscriber to a JetStream publisher with a
// Watermill router.
type Forwarder struct {
	router    *message.Router
	pub       *sink.Publisher
	logger    *slog.Logger
	connected func() bool
	seen      func(subject, stream string)
	admit     func(ctx context.Context, subject string) error
	missing   func(ctx context.Context, subject string)
	diagnose  func(ctx context.Context, subject string, err error) error
	tracer    trace.Tracer
	duration  prometheus.Observer
	stopped   func()
}

// NewPublisherMarshaler is the marshaler that turns the subscriber's
// messages into NATS messages; give it to sink.New.
func NewPublisherMarshaler() sink.Marshaler { return rowMarshaler{} }

// New builds the router: one handler from sub (topic: the table or
// forwarder topic it reads) to pub, with middlewares, outermost first:
// error classification, then panic recovery. sub is a source (package
// source): every message it emits carries a source.Delivery naming its
// subject, on which the handler reports the typed outcome before the
// message is acked (published) or nacked (failed); the source settles its
// row from that outcome. table.Subscriber (source: table),
// postgreswal.Subscriber (source: postgres-wal) and watermillforwarder.Source (source:
// watermill-forwarder) are such sources. pub's Marshaler builds the NATS
// message from the Watermill message.
func New(sub message.Subscriber, table string, pub *sink.Publisher, logger *slog.Logger, cfg Config) (*Forwarder, error) {
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = CloseTimeoutDefault
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	wlog := daemon.WatermillLogger(logger)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.CloseTimeout}, wlog)
	if err != nil {
		return nil, fmt.Errorf("create router: %w", err)
	}
	f := &Forwarder{router: router, pub: pub, logger: logger, connected: cfg.Connected, seen: cfg.StreamSeen, admit: cfg.Admit, missing: cfg.StreamMissing, diagnose: cfg.Diagnose, tracer: cfg.Tracer, stopped: cfg.Stopped}
	// First added is outermost: classification sees recovered panics too.
	router.AddMiddleware(f.classify, middleware.Recoverer)
	if cfg.Registerer != nil {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bridge_publish_duration_seconds",
			Help:    "Time from publishing a message to its PubAck (or failure).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms to 16 s
		})
		if err := cfg.Registerer.Register(h); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
		f.duration = h
		// The handler middleware only: Watermill's subscriber and publisher
		// decorators cost a goroutine and a channel hop per message and count
		// what bridge_rows_* already counts.
		router.AddMiddleware(metrics.NewPrometheusMetricsBuilder(cfg.Registerer, "watermill", "").NewRouterMiddleware().Middleware)
	}
	router.AddConsumerHandler("outbox_to_jetstream", table, sub, f.handle)
	return f, nil
}

// handle publishes the deliveries of one message — one row, or a claimed
// batch of rows — and reports each one's outcome as soon as it is known.
// They are handed to the NATS client one after another, in order, and
// their PubAcks awaited together (sink.Batch): a message, not a row, costs
// a goroutine of the router. A delivery that cannot be sent, or whose
// stream refuses it, fails alone; the others go on. It returns the first
// failure, so that the message is acked when every delivery was
// published, and nacked otherwise (classify).
func (f *Forwarder) handle(msg *message.Message) (failed error) {
	b := source.BatchOf(msg)
	if b == nil || b.Len() == 0 {
		return errNoDelivery
	}
	batch, err := f.pub.Begin(msg.Context(), b.Len())
	if err != nil {
		return err
	}
	defer batch.End()
	var spans []trace.Span // per delivery, only when one is traced
	done := func(i int, ack *jetstream.PubAck, err error, took time.Duration) {
		f.observe(took)
		failed = cmp.Or(failed, f.report(b.At(i), ack, err, spanAt(spans, i)))
	}
	for i := range b.Len() {
		// Outcomes already in are reported while the rest is handed over:
		// a long batch's hand-over may outlast the ack deadline.
		batch.Reap(i, done)
		d := b.At(i)
		ctx := d.Context
		if ctx == nil {
			ctx = msg.Context()
		}
		if f.admit != nil {
			if err := f.admit(ctx, d.Subject); err != nil {
				sink.Skip(ctx)
				failed = cmp.Or(failed, f.report(d, nil, refusedError{err}, nil))
				continue
			}
		}
		m := d.Msg
		if m == nil {
			if m, err = f.pub.Marshal(d.Subject, msg); err != nil {
				sink.Skip(ctx)
				failed = cmp.Or(failed, f.report(d, nil, err, nil))
				continue
			}
		}
		if parent := trace.SpanFromContext(ctx); parent.SpanContext().IsValid() {
			if spans == nil {
				spans = make([]trace.Span, b.Len())
			}
			ctx, spans[i] = f.tracer.Start(ctx, "publish "+d.Subject, trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithAttributes(attribute.String("messaging.system", "nats"),
					attribute.String("messaging.destination.name", d.Subject),
					attribute.String("messaging.message.id", m.Header.Get(jetstream.MsgIDHeader))))
		}
		if err := batch.Send(ctx, i, m, d.Handover, d.Deadline); err != nil {
			f.observe(0)
			failed = cmp.Or(failed, f.report(d, nil, err, spanAt(spans, i)))
		}
	}
	batch.Wait(done)
	return failed
}

// diagnoseMargin is how long before a message's deadline the diagnosis of
// its failed publish ends, so that its outcome reaches the source in time.
const diagnoseMargin = 100 * time.Millisecond

// diagnoseBefore diagnoses err (the broker's outage or the subject's own
// failure) within d's deadline, less diagnoseMargin: the source stops
// waiting at the deadline and counts a message without an outcome as an
// attempt, where an outage is not counted. The diagnosis asks the
// JetStream API (up to 3 s a request), which may be longer than an ack
// deadline leaves after the publish timeout (relay.ack_deadline 2s,
// relay.publish_timeout 1s: rows of a stream without quorum became dead
// letters); an API that does not answer within the time left is the
// outage's sign it is anyway.
func (f *Forwarder) diagnoseBefore(ctx context.Context, d *source.Delivery, err error) error {
	if !d.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Deadline.Add(-diagnoseMargin))
		defer cancel()
	}
	return f.diagnose(ctx, d.Subject, err)
}

// report reports the outcome of d's publish: its PubAck, or err
// classified. It returns the error as reported.
func (f *Forwarder) report(d *source.Delivery, ack *jetstream.PubAck, err error, span trace.Span) error {
	if err != nil {
		ctx := d.Context
		if ctx == nil {
			ctx = context.Background()
		}
		if f.diagnose != nil && !errors.Is(err, sink.ErrAckDeadline) { // a wait cut short tells nothing of the stream
			err = f.diagnoseBefore(ctx, d, err)
		}
		err = NoStream(d.Subject, err)
		if f.missing != nil && errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, broker.ErrBrokerUnavailable) {
			f.missing(ctx, d.Subject)
		}
		if span != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.End()
		}
		out := source.Failed(err, f.class(err))
		out.Own = Own(err)
		if errors.Is(err, broker.ErrBrokerUnavailable) {
			out.HoldFor = broker.OutageHoldBack
		}
		d.Report(out)
		return err
	}
	if span != nil {
		span.SetAttributes(attribute.String("nats.stream", ack.Stream), attribute.Int64("nats.stream_seq", int64(ack.Sequence)),
			attribute.Bool("nats.duplicate", ack.Duplicate))
		span.End()
	}
	if f.seen != nil {
		f.seen(d.Subject, ack.Stream)
	}
	d.Report(source.Published(ack.Stream, ack.Sequence, ack.Duplicate))
	return nil
}

func spanAt(spans []trace.Span, i int) trace.Span {
	if spans == nil {
		return nil
	}
	return spans[i]
}

func (f *Forwarder) observe(took time.Duration) {
	if f.duration != nil {
		f.duration.Observe(took.Seconds())
	}
}

// class is what err means for its row: Classify's class, Held for a
// publish the guard refused, and Unavailable for a retryable failure while
// the NATS connection is down (not closed for good).
func (f *Forwarder) class(err error) source.FailureClass {
	class := Classify(err)
	var refused refusedError
	switch {
	case errors.As(err, &refused):
		class = source.Held
	case class == source.Retryable && f.connected != nil && !f.connected() && !errors.Is(err, nats.ErrConnectionClosed):
		class = source.Unavailable
	}
	return class
}

// classify nacks a message whose handler failed: a delivery failed (its
// outcome is reported), or the handler as a whole did (a recovered panic,
// a message without deliveries, a publisher closed: the error is reported
// on every delivery not reported yet). It returns no error
// to the router: sources log failures, one line per settled batch, where
// the router would log one per message — thousands of lines in an outage.
func (f *Forwarder) classify(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err == nil {
			return out, nil
		}
		if b := source.BatchOf(msg); b != nil {
			class := f.class(err)
			for i := range b.Len() {
				b.At(i).Report(source.Failed(err, class))
			}
		}
		msg.Nack()
		return nil, nil
	}
}

// Run relays until ctx ends, then stops claiming, waits for publishes in
// progress (at most CloseTimeout), flushes marks and returns nil. It
// returns an error when the router stops by itself.
func (f *Forwarder) Run(ctx context.Context) error {
	return daemon.RunRouter(ctx, f.router, f.pub, f.stopped, f.logger, "relay stopping: draining publishes in progress")
}

// Running is closed once the router runs.
func (f *Forwarder) Running() <-chan struct{} { return f.router.Running() }

// NoStreamError is a publish that no stream answered: no stream captures
// its subject (jetstream.ErrNoStreamResponse, the client's "no response
// from stream" after the server's no-responders status). It is retryable:
// the stream may be created.
type NoStreamError struct {
	Subject string
	Err     error
}

func (e *NoStreamError) Error() string {
	return fmt.Sprintf("no stream captures subject %s: create a stream on it (streams, --ensure-stream NAME:SUBJECT) or fix the row's subject; retried with backoff up to relay.max_attempts, then a dead letter (%v)", e.Subject, e.Err)
}

func (e *NoStreamError) Unwrap() error { return e.Err }

// NoStream returns err, said in words as a *NoStreamError when it is
// jetstream.ErrNoStreamResponse.
func NoStream(subject string, err error) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, broker.ErrBrokerUnavailable) {
		return &NoStreamError{Subject: subject, Err: err}
	}
	return err
}

// errNoDelivery is the failure of a message that no source emitted: it
// carries no source.Delivery, so neither its subject nor a way to report
// its outcome is known.
var errNoDelivery = errors.New("message carries no source.Delivery: not emitted by a source")

// refusedError is a publish that Admit refused: not the row's fault, so
// the row is held back and its attempt given back.
type refusedError struct{ err error }

func (e refusedError) Error() string {
	return "held back, not published (attempt not counted): " + e.err.Error()
}
func (e refusedError) Unwrap() error { return e.err }
