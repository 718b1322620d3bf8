package dedup

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

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Defaults of ReconcilerConfig: those of dedup.reconcile_max_messages and
// dedup.reconcile_timeout.
const (
	ReconcileMaxMessagesDefault = config.ReconcileMaxMessagesDefault
	ReconcileTimeoutDefault     = config.ReconcileTimeoutDefault
	// clockSkew is subtracted from a scan's start time: first_claimed_at is
	// the database's clock, message timestamps are the NATS server's.
	clockSkew = time.Minute
	// filterMaxBytes bounds a subject filter of a scan. nats.go puts a
	// consumer's only filter into the API subject it creates the consumer
	// on ($JS.API.CONSUMER.CREATE.<stream>.<consumer>.<filter>: nats.go
	// jetstream/consumer.go), and a NATS server closes the connection of a
	// client whose protocol line exceeds its max_control_line (4,096 bytes
	// by default, less on some servers): a 4,000-byte subject filtered as
	// it is closed the relay's connection at every try. A longer subject is
	// filtered by a wildcard over its first tokens instead (the scan matches
	// rows by Nats-Msg-Id, so a wider filter only reads more).
	filterMaxBytes = 256
	// unresolvedLogInterval spaces the log lines about one subject whose
	// stream cannot be found.
	unresolvedLogInterval = 10 * time.Minute
	// missingRecheck is how long a subject whose stream was not found is
	// not looked up again.
	missingRecheck = 10 * time.Second
)

// ErrCannotTell is wrapped by the errors of InDoubt and Reconcile: whether
// a row's earlier publish is stored cannot be told now (the stream cannot
// be read: the JetStream API does not answer, or the relay's NATS user may
// not use it). The caller holds such a row back rather than publish what may
// be stored already.
var ErrCannotTell = errors.New("cannot tell whether the row's earlier publish is stored")

// ReconcilerConfig bounds the stream scans of a Reconciler.
type ReconcilerConfig struct {
	// Namespace is the Nats-Msg-Id prefix (dedup.namespace). Defaults to "".
	Namespace string
	// PublishTimeout is the relay's wait for a PubAck; a republish must be
	// stored before the original's id expires, so rows are in doubt that
	// much before the window ends. Defaults to 5s.
	PublishTimeout time.Duration
	// Horizon is the relay's redelivery horizon (relay.inflight_timeout +
	// relay.publish_timeout), the shortest duplicate window the guard
	// admits: a row claimed again soon enough after its first claim that any
	// such window still holds its id is not in doubt, even when its stream
	// cannot be read. Defaults to 35s.
	Horizon time.Duration
	// MaxMessages bounds the messages one scan reads. Defaults to 100000.
	MaxMessages int
	// Timeout bounds one scan. Defaults to 30s.
	Timeout time.Duration
	// Routes, when set, are the streams PubAcks named per subject: the
	// stream of a subject that the JetStream API cannot resolve (an account
	// subject mapping). Defaults to nil.
	Routes *Routes
	// Relayed, when set, returns the stream recorded on a relayed row of
	// subject ("" when there is none): the stream of a subject that neither
	// the JetStream API nor Routes resolve, e.g. after a restart. Defaults to
	// nil.
	Relayed func(ctx context.Context, subject string) (string, error)
	// Unavailable, when set, is told every lookup of a subject's stream
	// that the server answered with a JetStream API error
	// (broker.Keeper.Diagnose): a cluster that cannot serve it (JetStream
	// 10008) is the stream's outage, and rows in
	// doubt wait for it as published rows do, so that readiness does not
	// call the stream healthy while they wait. Defaults to nil.
	Unavailable func(ctx context.Context, subject string, err error) error
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

	mu         sync.Mutex
	streams    map[string]streamWindow // by subject
	unresolved map[string]time.Time    // subject → last logged

	// Reconciled counts rows found in a stream (not republished);
	// Incomplete counts scans stopped by a bound; Unresolved counts rows in
	// doubt whose stream could not be found, published without a scan;
	// ScansFailed counts scans whose stream or consumer failed until their
	// bound (their rows are held back, not republished).
	Reconciled, Incomplete, Unresolved, ScansFailed atomic.Int64
}

// streamWindow is what a scan needs to know of the stream of a subject.
type streamWindow struct {
	name    string
	window  time.Duration
	checked time.Time
	// missing: no stream was found for the subject at all.
	missing bool
	// bySubject: the JetStream API resolved the subject to the stream, so
	// the stream stores it under that subject (after transform, when the
	// stream has one); a stream learned from a PubAck or a relayed row may
	// store it under another (an account mapping), and is scanned whole.
	bySubject bool
	transform server.SubjectTransformer
}

// NewReconciler returns a Reconciler; zero config fields take defaults.
func NewReconciler(js jetstream.JetStream, logger *slog.Logger, cfg ReconcilerConfig) *Reconciler {
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = 5 * time.Second
	}
	if cfg.Horizon == 0 {
		cfg.Horizon = 30*time.Second + cfg.PublishTimeout
	}
	if cfg.MaxMessages == 0 {
		cfg.MaxMessages = ReconcileMaxMessagesDefault
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = ReconcileTimeoutDefault
	}
	return &Reconciler{js: js, cfg: cfg, logger: logger, streams: map[string]streamWindow{}, unresolved: map[string]time.Time{}}
}

// Inherit takes over prev's counts (the reconciler of an earlier relay of
// this process).
func (r *Reconciler) Inherit(prev *Reconciler) {
	r.Reconciled.Add(prev.Reconciled.Load())
	r.Incomplete.Add(prev.Incomplete.Load())
	r.Unresolved.Add(prev.Unresolved.Load())
	r.ScansFailed.Add(prev.ScansFailed.Load())
}

// safeWithin is how long after a row's first claim a republish is still
// deduplicated by a stream whose duplicate window is window: the window less
// the publish timeout and a margin of a tenth of the window.
func (r *Reconciler) safeWithin(window time.Duration) time.Duration {
	return window - r.cfg.PublishTimeout - window/10
}

// InDoubt reports whether a republish of c may no longer be deduplicated by
// its stream: c was claimed before (its outcome then is unknown to this
// claim) and its first claim is older than the stream's duplicate window
// minus the publish timeout and a margin of a tenth of the window. Both
// times are from the database clock.
//
// The stream of the subject is asked of the JetStream API, then of Routes,
// then of Relayed. A subject whose stream is found nowhere is not in doubt
// (no stream captures it, so nothing of it is stored — unless an account
// mapping hides its stream from all three: then it is published without a
// scan, logged and counted by Unresolved). Errors wrap ErrCannotTell: the
// stream cannot be read and c was first claimed longer ago than the
// shortest window the guard admits (Horizon) covers.
func (r *Reconciler) InDoubt(ctx context.Context, c Candidate) (bool, error) {
	if c.FirstClaimedAt.IsZero() || !c.ClaimedAt.After(c.FirstClaimedAt) {
		return false, nil // first claim: nothing was published before
	}
	elapsed := c.ClaimedAt.Sub(c.FirstClaimedAt)
	sw, err := r.stream(ctx, c.Subject)
	if err != nil {
		if elapsed <= r.safeWithin(r.cfg.Horizon) {
			return false, nil
		}
		return false, fmt.Errorf("%w: first claimed %s ago: %w", ErrCannotTell, elapsed.Round(time.Millisecond), err)
	}
	if sw.missing {
		if elapsed > r.safeWithin(r.cfg.Horizon) {
			r.unresolvedSubject(c.Subject)
		}
		return false, nil
	}
	return elapsed > r.safeWithin(sw.window), nil
}

// unresolvedSubject counts a row in doubt whose stream was found nowhere,
// and logs it once per subject and unresolvedLogInterval.
func (r *Reconciler) unresolvedSubject(subject string) {
	r.Unresolved.Add(1)
	r.mu.Lock()
	logged := time.Since(r.unresolved[subject]) < unresolvedLogInterval
	if !logged {
		if len(r.unresolved) >= routesMax {
			clear(r.unresolved)
		}
		r.unresolved[subject] = time.Now()
	}
	r.mu.Unlock()
	if !logged {
		// Info: the row's own failure ("no stream captures subject …")
		// is what the operator acts on; this says only why its retry is
		// not checked against a stream first.
		r.logger.Info("a row tried before is published again without looking for its earlier publish: no stream captures its subject (or an account subject mapping hides the stream from the relay)",
			slog.String("subject", subject))
	}
}

func (r *Reconciler) stream(ctx context.Context, subject string) (streamWindow, error) {
	r.mu.Lock()
	sw, ok := r.streams[subject]
	r.mu.Unlock()
	if ok && (time.Since(sw.checked) < time.Minute && !sw.missing || time.Since(sw.checked) < missingRecheck) {
		return sw, nil
	}
	name, err := r.js.StreamNameBySubject(ctx, subject)
	bySubject := err == nil
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if n, ok := r.cfg.Routes.Stream(subject); ok {
			name, err = n, nil
		} else if r.cfg.Relayed != nil {
			n, rerr := r.cfg.Relayed(ctx, subject)
			switch {
			case rerr != nil:
				err = fmt.Errorf("look up the stream of a relayed row of %s: %w", subject, rerr)
			case n != "":
				name, err = n, nil
			}
		}
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		sw = streamWindow{missing: true, checked: time.Now()}
		r.remember(subject, sw)
		return sw, nil
	}
	if err != nil {
		r.unavailable(ctx, subject, err)
		return streamWindow{}, fmt.Errorf("find the stream of %.80s: %w", subject, err)
	}
	s, err := r.js.Stream(ctx, name)
	if err != nil {
		r.unavailable(ctx, subject, err)
		return streamWindow{}, fmt.Errorf("read stream %s: %w", name, err)
	}
	cfg := s.CachedInfo().Config
	sw = streamWindow{name: name, window: cfg.Duplicates, checked: time.Now(), bySubject: bySubject}
	if t := cfg.SubjectTransform; t != nil && bySubject {
		// The stream stores the subject transformed: the scan filters by
		// what it stores.
		if tr, err := server.NewSubjectTransform(t.Source, t.Destination); err == nil {
			sw.transform = tr
		} else {
			sw.bySubject = false
		}
	}
	r.remember(subject, sw)
	return sw, nil
}

func (r *Reconciler) remember(subject string, sw streamWindow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.streams) >= routesMax {
		clear(r.streams)
	}
	r.streams[subject] = sw
}

// filter returns the subject under which the stream of sw stores subject,
// or false when it cannot be told (the stream is scanned whole).
func (sw streamWindow) filter(subject string) (string, bool) {
	if !sw.bySubject {
		return "", false
	}
	if sw.transform != nil {
		if out, err := sw.transform.Match(subject); err == nil {
			subject = out
		}
	}
	return subject, true
}

// scanFilters returns the subject filters of a scan for subjects, each at
// most filterMaxBytes long (a longer subject is filtered by a wildcard over
// its first tokens), none covered by another (the server refuses
// overlapping filters); nil, to scan every subject, when one cannot be
// filtered.
func scanFilters(subjects []string) []string {
	var out []string
	for _, s := range subjects {
		f := fitFilter(s)
		if f == "" {
			return nil
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	kept := out[:0]
	for i, f := range out {
		covered := false
		for j, g := range out {
			if i != j && f != g && server.SubjectMatchesFilter(f, g) {
				covered = true
				break
			}
		}
		if !covered {
			kept = append(kept, f)
		}
	}
	return kept
}

// fitFilter returns subject, or when it is longer than filterMaxBytes the
// wildcard "<first tokens>.>" that covers it within that length; "" when
// not even its first token fits.
func fitFilter(subject string) string {
	if len(subject) <= filterMaxBytes {
		return subject
	}
	prefix := ""
	for token := range strings.SplitSeq(subject, ".") {
		next := token
		if prefix != "" {
			next = prefix + "." + token
		}
		if len(next)+len(".>") > filterMaxBytes {
			break
		}
		prefix = next
	}
	if prefix == "" {
		return ""
	}
	return prefix + ".>"
}

// Reconcile scans, per stream, the messages stored since the earliest first
// claim of the candidates (headers only, filtered to the subjects they are
// stored under when known) and returns the candidates whose Nats-Msg-Id it
// found, by row id. The scan stops at the last message stored when it
// began, or at MaxMessages, Timeout or the end of ctx; then the candidates
// not seen are reported as not found (they are republished) and
// Incomplete is counted. Errors (a stream or consumer that cannot be read)
// wrap ErrCannotTell.
func (r *Reconciler) Reconcile(ctx context.Context, candidates []Candidate) (map[int64]Stored, error) {
	type group struct {
		cs       []Candidate
		subjects []string
		whole    bool
	}
	byStream := map[string]*group{}
	for _, c := range candidates {
		sw, err := r.stream(ctx, c.Subject)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCannotTell, err)
		}
		if sw.missing {
			continue
		}
		g := byStream[sw.name]
		if g == nil {
			g = &group{}
			byStream[sw.name] = g
		}
		g.cs = append(g.cs, c)
		if f, ok := sw.filter(c.Subject); ok {
			g.subjects = append(g.subjects, f)
		} else {
			g.whole = true
		}
	}
	found := map[int64]Stored{}
	for name, g := range byStream {
		filters := scanFilters(g.subjects)
		if g.whole {
			filters = nil
		}
		if err := r.scan(ctx, name, g.cs, filters, found); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCannotTell, err)
		}
	}
	r.Reconciled.Add(int64(len(found)))
	return found, nil
}

// scanRetryMax bounds the wait between two tries of a scan's consumer.
const scanRetryMax = time.Second

// scan reads stream from the earliest first claim of cs for their ids. A
// stream info, consumer or fetch that fails — on a cluster an ordered
// consumer can fail its first fetches with "no responders" while its
// assignment propagates, and any request fails while the stream has no
// leader — is tried again, the consumer made again from the message after
// the last one read, until the scan's bound (dedup.reconcile_timeout, or
// the lease) ends: then the scan failed (an error, counted by
// ScansFailed), and its rows are held back rather than republished.
func (r *Reconciler) scan(parent context.Context, streamName string, cs []Candidate, filters []string, found map[int64]Stored) error {
	ctx, cancel := context.WithTimeout(parent, r.cfg.Timeout)
	defer cancel()
	bound := func() string {
		if parent.Err() != nil {
			return "the lease (relay.inflight_timeout less relay.ack_deadline)"
		}
		return "dedup.reconcile_timeout"
	}
	want := make(map[string]int64, len(cs))
	start := cs[0].FirstClaimedAt
	for _, c := range cs {
		want[outbox.MsgID(r.cfg.Namespace, c.IdempotencyKey)] = c.ID
		if c.FirstClaimedAt.Before(start) {
			start = c.FirstClaimedAt
		}
	}
	from := start.Add(-clockSkew)
	var (
		last     uint64 // the stream's last sequence when the scan began
		next     uint64 // the sequence to read from; 0: from the start time
		read     int
		lastErr  error
		failures int
		readAt   int // read at the last failure
	)
	retry := func(err error) bool {
		lastErr, readAt = err, read
		failures++
		wait := min(100*time.Millisecond<<min(failures, 4), scanRetryMax)
		r.logger.Debug("reconcile scan: trying again", slog.String("stream", streamName), slog.Int("failures", failures), slog.Any("error", err))
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
			return true
		}
	}
	failed := func() error {
		r.ScansFailed.Add(1)
		err := fmt.Errorf("reconcile against stream %s: failed %d times within %s, last: %w", streamName, failures, bound(), lastErr)
		r.logger.Warn("reconcile scan failed; its rows are held back and tried again", slog.String("stream", streamName),
			slog.Int("messages_read", read), slog.Int("rows_not_found", len(want)), slog.Any("error", err))
		return err
	}
	var s jetstream.Stream
	for s == nil {
		var err error
		if s, err = r.js.Stream(ctx, streamName); err != nil {
			s = nil
			if !retry(err) {
				return failed()
			}
		}
	}
	last = s.CachedInfo().State.LastSeq
	for len(want) > 0 {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, HeadersOnly: true,
			DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from}
		if next > 0 {
			cfg.DeliverPolicy, cfg.OptStartTime, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, nil, next
		}
		cons, err := s.OrderedConsumer(ctx, cfg)
		if err != nil {
			if !retry(err) {
				return failed()
			}
			continue
		}
		done, err := r.read(ctx, cons, streamName, last, want, found, &read, &next)
		switch {
		case done:
			return nil
		case errors.Is(err, errScanBound):
			if lastErr != nil && read == readAt {
				return failed() // nothing read since the last failure
			}
			return r.incomplete(streamName, read, len(want), bound())
		case errors.Is(err, errScanMax):
			return r.incomplete(streamName, read, len(want), "dedup.reconcile_max_messages")
		case err != nil:
			if !retry(err) {
				return failed()
			}
		}
	}
	return nil
}

var (
	errScanBound = errors.New("scan bound reached")
	errScanMax   = errors.New("scan message bound reached")
)

// read fetches from cons until every id is found, the stream's last
// sequence when the scan began is read (done), a bound is reached
// (errScanBound, errScanMax), or a fetch fails (its error: the caller makes
// the consumer again from *next).
func (r *Reconciler) read(ctx context.Context, cons jetstream.Consumer, streamName string, last uint64, want map[string]int64, found map[int64]Stored, read *int, next *uint64) (bool, error) {
	for len(want) > 0 {
		if *read >= r.cfg.MaxMessages {
			return false, errScanMax
		}
		batch, err := cons.Fetch(min(500, r.cfg.MaxMessages-*read), jetstream.FetchMaxWait(time.Second))
		if ctx.Err() != nil {
			return false, errScanBound
		}
		if err != nil {
			return false, err
		}
		n, done := 0, false
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			*next = meta.Sequence.Stream + 1
			if id, ok := want[m.Headers().Get(jetstream.MsgIDHeader)]; ok {
				found[id] = Stored{Stream: streamName, Seq: meta.Sequence.Stream}
				delete(want, m.Headers().Get(jetstream.MsgIDHeader))
			}
			if meta.Sequence.Stream >= last || meta.NumPending == 0 {
				done = true
			}
		}
		*read += n
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			if ctx.Err() != nil {
				return false, errScanBound
			}
			return done, err
		}
		if done {
			return true, nil
		}
		if n == 0 {
			// An empty fetch is not the end: a busy server may be slow to
			// deliver. Ask the consumer whether anything is left.
			info, err := cons.Info(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return false, errScanBound
				}
				return false, err
			}
			if info.NumPending == 0 {
				return true, nil
			}
		}
	}
	return true, nil
}

func (r *Reconciler) incomplete(stream string, read, left int, bound string) error {
	r.Incomplete.Add(1)
	r.logger.Warn("reconcile scan stopped by its bound; the rows not found are published again and may be duplicated",
		slog.String("stream", stream), slog.Int("messages_read", read), slog.Int("rows_not_found", left), slog.String("bound", bound))
	return nil
}

// unavailable tells ReconcilerConfig.Unavailable of a lookup the server
// answered with a JetStream API error (such as 10008, "JetStream system
// temporarily unavailable"): the cluster is up and says it cannot serve
// the stream. A lookup not answered at all (a frozen server, a lost
// connection) is not told: that is the connection's fault, which the
// liveness probe is for.
func (r *Reconciler) unavailable(ctx context.Context, subject string, err error) {
	var apiErr *jetstream.APIError
	if r.cfg.Unavailable != nil && errors.As(err, &apiErr) {
		_ = r.cfg.Unavailable(ctx, subject, err) // it records the outage; the lookup's error is returned as it is
	}
}
