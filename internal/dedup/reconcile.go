package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of ReconcilerConfig.
const (
	ReconcileMaxMessagesDefault = 100000
	ReconcileTimeoutDefault     = 30 * time.Second
	// clockSkew is subtracted from a scan's start time: first_claimed_at is
	// the database's clock, message timestamps are the NATS server's.
	clockSkew = time.Minute
)

// ReconcilerConfig bounds the stream scans of a Reconciler.
type ReconcilerConfig struct {
	// Namespace is the Nats-Msg-Id prefix (dedup.namespace). Defaults to "".
	Namespace string
	// PublishTimeout is the relay's wait for a PubAck; a republish must be
	// stored before the original's id expires, so rows are in doubt that
	// much before the window ends. Defaults to 5s.
	PublishTimeout time.Duration
	// MaxMessages bounds the messages one scan reads. Defaults to 100000.
	MaxMessages int
	// Timeout bounds one scan. Defaults to 30s.
	Timeout time.Duration
}

// Candidate is a row to be republished whose earlier publish may have been
// stored.
type Candidate struct {
	ID             int64
	IdempotencyKey string
	Subject        string
	// FirstClaimedAt and ClaimedAt come from the database clock.
	FirstClaimedAt, ClaimedAt time.Time
}

// Stored is where a candidate's message was found.
type Stored struct {
	Stream string
	Seq    uint64
}

// Reconciler settles rows whose earlier publish has an unknown outcome and
// whose Nats-Msg-Id may have left the stream's duplicate window: JetStream
// would store a republish as a new message. Before such a row is published
// again, Reconcile scans the stream (headers only, from the first claim on)
// for its Nats-Msg-Id; a row found there is settled as relayed instead.
type Reconciler struct {
	js     jetstream.JetStream
	cfg    ReconcilerConfig
	logger *slog.Logger

	mu      sync.Mutex
	streams map[string]streamWindow // by subject

	// Reconciled counts rows found in a stream (not republished);
	// Incomplete counts scans stopped by a bound.
	Reconciled, Incomplete atomic.Int64
}

type streamWindow struct {
	name    string
	window  time.Duration
	checked time.Time
}

// NewReconciler returns a Reconciler; zero config fields take defaults.
func NewReconciler(js jetstream.JetStream, logger *slog.Logger, cfg ReconcilerConfig) *Reconciler {
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = 5 * time.Second
	}
	if cfg.MaxMessages == 0 {
		cfg.MaxMessages = ReconcileMaxMessagesDefault
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = ReconcileTimeoutDefault
	}
	return &Reconciler{js: js, cfg: cfg, logger: logger, streams: map[string]streamWindow{}}
}

// InDoubt reports whether a republish of c may no longer be deduplicated by
// its stream: c was claimed before (its outcome then is unknown to this
// claim) and its first claim is older than the stream's duplicate window
// minus the publish timeout and a margin of a tenth of the window. Both
// times are from the database clock. Errors: the stream of the subject
// cannot be looked up (the row is then published as usual).
func (r *Reconciler) InDoubt(ctx context.Context, c Candidate) (bool, error) {
	if c.FirstClaimedAt.IsZero() || !c.ClaimedAt.After(c.FirstClaimedAt) {
		return false, nil // first claim: nothing was published before
	}
	sw, err := r.stream(ctx, c.Subject)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// No stream captures the subject, so no earlier publish of the row
		// is stored: publishing it again cannot double it.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	safe := sw.window - r.cfg.PublishTimeout - sw.window/10
	return c.ClaimedAt.Sub(c.FirstClaimedAt) > safe, nil
}

func (r *Reconciler) stream(ctx context.Context, subject string) (streamWindow, error) {
	r.mu.Lock()
	sw, ok := r.streams[subject]
	r.mu.Unlock()
	if ok && time.Since(sw.checked) < time.Minute {
		return sw, nil
	}
	name, err := r.js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return streamWindow{}, fmt.Errorf("find the stream of %s: %w", subject, err)
	}
	s, err := r.js.Stream(ctx, name)
	if err != nil {
		return streamWindow{}, fmt.Errorf("read stream %s: %w", name, err)
	}
	sw = streamWindow{name: name, window: s.CachedInfo().Config.Duplicates, checked: time.Now()}
	r.mu.Lock()
	r.streams[subject] = sw
	r.mu.Unlock()
	return sw, nil
}

// Reconcile scans, per stream, the messages stored since the earliest first
// claim of the candidates (headers only, filtered to their subjects) and
// returns the candidates whose Nats-Msg-Id it found, by row id. The scan
// stops at the last message stored when it began, or at MaxMessages or
// Timeout; then the candidates not seen are reported as not found (they
// are republished) and Incomplete is counted.
func (r *Reconciler) Reconcile(ctx context.Context, candidates []Candidate) (map[int64]Stored, error) {
	byStream := map[string][]Candidate{}
	for _, c := range candidates {
		sw, err := r.stream(ctx, c.Subject)
		if err != nil {
			return nil, err
		}
		byStream[sw.name] = append(byStream[sw.name], c)
	}
	found := map[int64]Stored{}
	for name, cs := range byStream {
		if err := r.scan(ctx, name, cs, found); err != nil {
			return nil, err
		}
	}
	r.Reconciled.Add(int64(len(found)))
	return found, nil
}

func (r *Reconciler) scan(ctx context.Context, streamName string, cs []Candidate, found map[int64]Stored) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	want := make(map[string]int64, len(cs))
	var subjects []string
	start := cs[0].FirstClaimedAt
	for _, c := range cs {
		want[MsgID(r.cfg.Namespace, c.IdempotencyKey)] = c.ID
		if !slices.Contains(subjects, c.Subject) {
			subjects = append(subjects, c.Subject)
		}
		if c.FirstClaimedAt.Before(start) {
			start = c.FirstClaimedAt
		}
	}
	s, err := r.js.Stream(ctx, streamName)
	if err != nil {
		return fmt.Errorf("reconcile against stream %s: %w", streamName, err)
	}
	last := s.CachedInfo().State.LastSeq
	from := start.Add(-clockSkew)
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from, HeadersOnly: true,
	})
	if err != nil {
		return fmt.Errorf("reconcile against stream %s: %w", streamName, err)
	}
	read := 0
	for len(want) > 0 {
		if read >= r.cfg.MaxMessages {
			return r.incomplete(streamName, read, len(want), "dedup.reconcile_max_messages")
		}
		batch, err := cons.Fetch(min(500, r.cfg.MaxMessages-read), jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return r.incomplete(streamName, read, len(want), "dedup.reconcile_timeout")
		}
		if err != nil {
			return fmt.Errorf("reconcile against stream %s: %w", streamName, err)
		}
		n, done := 0, false
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			if id, ok := want[m.Headers().Get(jetstream.MsgIDHeader)]; ok {
				found[id] = Stored{Stream: streamName, Seq: meta.Sequence.Stream}
				delete(want, m.Headers().Get(jetstream.MsgIDHeader))
			}
			if meta.Sequence.Stream >= last || meta.NumPending == 0 {
				done = true
			}
		}
		read += n
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			if ctx.Err() != nil {
				return r.incomplete(streamName, read, len(want), "dedup.reconcile_timeout")
			}
			return fmt.Errorf("reconcile against stream %s: %w", streamName, err)
		}
		if done {
			return nil
		}
		if n == 0 {
			// An empty fetch is not the end: a busy server may be slow to
			// deliver. Ask the consumer whether anything is left.
			info, err := cons.Info(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return r.incomplete(streamName, read, len(want), "dedup.reconcile_timeout")
				}
				return fmt.Errorf("reconcile against stream %s: %w", streamName, err)
			}
			if info.NumPending == 0 {
				return nil
			}
		}
	}
	return nil
}

func (r *Reconciler) incomplete(stream string, read, left int, bound string) error {
	r.Incomplete.Add(1)
	r.logger.Warn("reconcile scan stopped by its bound; the rows not found are published again and may be duplicated",
		slog.String("stream", stream), slog.Int("messages_read", read), slog.Int("rows_not_found", left), slog.String("bound", bound))
	return nil
}
