package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/config"
)

// GuardMode says what the duplicate-window guard does about an unsafe
// stream.
type GuardMode string

// The guard modes (configuration key dedup.guard).
const (
	GuardRefuse GuardMode = "refuse" // hold back the rows of an unsafe stream
	GuardWarn   GuardMode = "warn"   // log once per stream and problem, and count
	GuardOff    GuardMode = "off"    // do not check
)

// GuardIntervalDefault is how often a running relay checks its streams again.
const GuardIntervalDefault = time.Minute

// admitTimeout bounds the JetStream API requests of one Admit: the
// message waits for them, against its publish deadline, and a stream that
// cannot be read in that time is admitted unchecked (see Unchecked).
const admitTimeout = time.Second

// HoldBack is how long the rows of a stream the guard refuses are held
// back before they are tried again, and how often at most the guard
// inspects such a stream again: a fixed stream lets its rows through
// within about this long, without a restart.
const HoldBack = 15 * time.Second

// UnsafeStreamError says why a stream cannot deduplicate the relay's
// republishes, and how to fix it.
type UnsafeStreamError struct {
	Stream  string
	Problem string
	Fix     string
}

func (e *UnsafeStreamError) Error() string {
	return fmt.Sprintf("stream %s cannot deduplicate the relay's republishes: %s; %s (or set dedup.guard to warn or off)", e.Stream, e.Problem, e.Fix)
}

// Guard checks that the streams the relay publishes to keep a Nats-Msg-Id
// at least as long as a row can be republished after its first publish
// (the redelivery horizon: relay.inflight_timeout + relay.publish_timeout).
//
// A stream is unsafe when its duplicate window is shorter than the horizon;
// when its retention is WorkQueue or Interest (an acked message is deleted,
// and after a server restart its id is forgotten: nats-server#3272); or
// when its max age is shorter than its duplicate window (the id expires
// with the message). JetStream's duplicate window counts from the first
// store of an id and is not extended by duplicates (nats-server#7302).
//
// In refuse mode an unsafe stream never stops the relay, whether found at
// start (an ensured stream an operator changed: the relay's own stream
// specs are checked by the configuration) or later: Admit refuses the
// subjects it captures, their rows are held back (see HoldBack), and every
// other stream keeps flowing. Each finding is logged once per stream and
// problem, counted, and listed by Unsafe; a stream that cannot be checked
// is listed by Unchecked.
type Guard struct {
	js      jetstream.JetStream
	mode    GuardMode
	horizon time.Duration
	logger  *slog.Logger
	routes  *Routes

	mu        sync.Mutex
	seen      []string
	ensured   []string
	logged    map[string]bool     // stream + problem logged (and counted) once
	verdicts  map[string]*verdict // stream name → last inspection
	unchecked map[string]error    // stream name → why it cannot be checked now
	lookups   map[string]error    // subject → why its stream could not be looked up (until a lookup answers)

	subjects sync.Map // subject → resolution; cleared at every periodic check

	// recheck is how often Run inspects again the streams found unsafe or
	// unreadable (HoldBack): readiness follows a fixed stream within it,
	// whether or not rows of the stream wait.
	recheck time.Duration

	// Violations counts unsafe findings (each stream and problem once).
	Violations atomic.Int64
}

// resolution is what Admit found for a subject: its stream, or none until
// retry.
type resolution struct {
	name  string
	retry time.Time // when name is "": look the subject up again after this
}

// verdict is the result of inspecting one stream.
type verdict struct {
	unsafe *UnsafeStreamError // nil: safe
	at     time.Time
}

// NewGuard returns a guard for streams (those the relay ensures); more are
// added with Observe and Published. routes, when not nil, is told the
// stream of every PubAck and asked for the stream of a subject the
// JetStream API cannot resolve. Errors: an unknown mode.
func NewGuard(js jetstream.JetStream, mode GuardMode, horizon time.Duration, streams []string, routes *Routes, logger *slog.Logger) (*Guard, error) {
	switch mode {
	case GuardRefuse, GuardWarn, GuardOff:
	default:
		return nil, fmt.Errorf("%w: dedup.guard: %q: must be refuse, warn or off", config.ErrInvalid, mode)
	}
	return &Guard{js: js, mode: mode, horizon: horizon, logger: logger, routes: routes, seen: slices.Clone(streams),
		ensured: slices.Clone(streams), logged: map[string]bool{}, verdicts: map[string]*verdict{}, unchecked: map[string]error{},
		lookups: map[string]error{}, recheck: HoldBack}, nil
}

// Inherit takes over what prev (the guard of an earlier relay of this
// process) found: the streams it watched, their verdicts (an unsafe stream
// stays held back, logged once), the streams it could not check, the routes
// PubAcks taught it and its count of findings.
func (g *Guard) Inherit(prev *Guard) {
	prev.mu.Lock()
	seen, logged, unchecked := slices.Clone(prev.seen), maps.Clone(prev.logged), maps.Clone(prev.unchecked)
	lookups := maps.Clone(prev.lookups)
	verdicts := maps.Clone(prev.verdicts)
	prev.mu.Unlock()
	g.mu.Lock()
	for _, name := range seen {
		if !slices.Contains(g.seen, name) {
			g.seen = append(g.seen, name)
		}
	}
	for key := range logged {
		if g.logged[key] {
			g.Violations.Add(-1) // found again at this relay's start: counted once
		}
		g.logged[key] = true
	}
	for name, v := range verdicts {
		if _, ok := g.verdicts[name]; !ok {
			g.verdicts[name] = v
		}
	}
	for name, err := range unchecked {
		if _, ok := g.unchecked[name]; !ok {
			g.unchecked[name] = err
		}
	}
	for subject, err := range lookups {
		if _, ok := g.lookups[subject]; !ok {
			g.lookups[subject] = err
		}
	}
	g.mu.Unlock()
	g.Violations.Add(prev.Violations.Load())
	g.routes.inherit(prev.routes)
}

// Observe adds a stream the relay published to (from a PubAck). Safe for
// concurrent use; cheap when the stream is known.
func (g *Guard) Observe(stream string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if stream != "" && !slices.Contains(g.seen, stream) {
		g.seen = append(g.seen, stream)
	}
}

// Published is told the stream a PubAck named for a publish to subject. The
// stream is observed, and a subject the JetStream API could not resolve to
// a stream (an account subject mapping) is admitted by that stream's
// verdict from now on. Safe for concurrent use.
func (g *Guard) Published(subject, stream string) {
	if stream == "" {
		return
	}
	if v, ok := g.subjects.Load(subject); ok && v.(resolution).name == stream {
		return // known: every PubAck comes here
	}
	g.Observe(stream) // a failed lookup stays listed: the stream is not checked yet
	g.routes.Learn(subject, stream)
	if v, ok := g.subjects.Load(subject); ok && v.(resolution).name == "" {
		g.subjects.Store(subject, resolution{name: stream})
	}
}

// Check inspects every known stream once: at start, the streams the relay
// ensures. An unsafe stream is logged once and, in refuse mode, its rows
// are held back from then on; it does not stop the relay. A stream that
// cannot be read is logged and listed by Unchecked.
func (g *Guard) Check(ctx context.Context) {
	if g.mode == GuardOff {
		return
	}
	for _, name := range g.streams() {
		unsafe, err := g.inspectStream(ctx, name)
		if err != nil {
			if ctx.Err() == nil {
				g.logger.Warn("dedup guard: cannot read stream", slog.String("stream", name), slog.Any("error", err))
			}
			continue
		}
		if unsafe != nil {
			g.report(unsafe)
		}
	}
}

func (g *Guard) streams() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.seen)
}

// lookUpAgain looks up again the subjects whose lookup failed, until one
// fails again as they did (the API still does not answer: the next round
// tries again), and returns the streams found that the guard has no verdict of
// yet: to be inspected, so that the first finding on them does not wait
// for a row.
func (g *Guard) lookUpAgain(ctx context.Context) []string {
	var found []string
	for _, subject := range g.failedLookups() {
		lookup, cancel := context.WithTimeout(ctx, admitTimeout)
		name, err := g.lookUp(lookup, subject)
		cancel()
		if apiFailed(err) {
			break
		}
		if err != nil {
			continue // not found, or the subject's own error: not listed
		}
		g.subjects.Store(subject, resolution{name: name})
		g.Observe(name)
		g.mu.Lock()
		_, known := g.verdicts[name]
		g.mu.Unlock()
		if !known {
			found = append(found, name)
		}
	}
	return found
}

// troubled returns the known streams found unsafe or unreadable at their
// last inspection.
func (g *Guard) troubled() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(g.seen), func(name string) bool {
		v := g.verdicts[name]
		_, unreadable := g.unchecked[name]
		return !unreadable && (v == nil || v.unsafe == nil)
	})
}

// inspectStream reads stream name and records its verdict. A stream that
// no longer exists loses its verdict (its rows are no longer held back by
// it: they go where their subject leads now) and, unless the relay ensures
// it, is no longer watched.
func (g *Guard) inspectStream(ctx context.Context, name string) (*UnsafeStreamError, error) {
	s, err := g.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		g.mu.Lock()
		prev := g.verdicts[name]
		delete(g.verdicts, name)
		delete(g.unchecked, name)
		if !slices.Contains(g.ensured, name) {
			g.seen = slices.DeleteFunc(g.seen, func(s string) bool { return s == name })
		}
		g.mu.Unlock()
		g.forget(name)
		if prev != nil && prev.unsafe != nil {
			g.logger.Info("dedup guard: stream no longer exists; its rows are no longer held back by it", slog.String("stream", name))
		}
		return nil, err
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) { // canceled: the relay stops
			g.mu.Lock()
			g.unchecked[name] = err
			g.mu.Unlock()
		}
		return nil, err
	}
	unsafe := g.inspect(name, s.CachedInfo().Config)
	g.mu.Lock()
	prev := g.verdicts[name]
	g.verdicts[name] = &verdict{unsafe: unsafe, at: time.Now()}
	delete(g.unchecked, name)
	g.mu.Unlock()
	if unsafe == nil && prev != nil && prev.unsafe != nil && g.mode == GuardRefuse {
		g.logger.Info("dedup guard: stream is safe now; its rows are relayed again", slog.String("stream", name))
	}
	return unsafe, nil
}

// forget drops the subjects resolved to stream name.
func (g *Guard) forget(name string) {
	g.subjects.Range(func(k, v any) bool {
		if v.(resolution).name == name {
			g.subjects.Delete(k)
		}
		return true
	})
}

func (g *Guard) inspect(name string, cfg jetstream.StreamConfig) *UnsafeStreamError {
	window := cfg.Duplicates
	switch {
	case cfg.Retention == jetstream.WorkQueuePolicy || cfg.Retention == jetstream.InterestPolicy:
		return &UnsafeStreamError{Stream: name,
			Problem: fmt.Sprintf("retention is %s: an acknowledged message is deleted and its Nats-Msg-Id forgotten after a server restart (nats-server#3272)", cfg.Retention),
			Fix:     "publish to a stream with limits retention and source or mirror it into a work queue"}
	case window < g.horizon:
		return &UnsafeStreamError{Stream: name,
			Problem: fmt.Sprintf("duplicate window %s is shorter than the relay's redelivery horizon %s (relay.inflight_timeout + relay.publish_timeout)", window, g.horizon),
			Fix:     fmt.Sprintf("raise the stream's duplicate window to at least %s, or lower relay.inflight_timeout", g.horizon)}
	case cfg.MaxAge > 0 && cfg.MaxAge < window:
		return &UnsafeStreamError{Stream: name,
			Problem: fmt.Sprintf("max age %s is shorter than the duplicate window %s: ids expire with their messages", cfg.MaxAge, window),
			Fix:     "raise the stream's max age above its duplicate window"}
	}
	return nil
}

// Admit is asked before a message is published to subject. It finds the
// subject's stream (once per subject and check interval) and that
// stream's verdict: inspected the first time, again by every periodic
// check, and for an unsafe stream again at most every HoldBack. In refuse
// mode an unsafe stream returns its *UnsafeStreamError: nothing is
// published to it, and the caller holds the row back without counting the
// attempt. In warn mode an unsafe stream is logged once and admitted.
//
// A subject whose stream the JetStream API cannot name is resolved by the
// stream a PubAck named for it (see Published): an account subject mapping
// hides the stream from the API but not from the publish. Until a PubAck
// names one, it is admitted — the publish fails when no stream captures the
// subject, and otherwise tells the guard the stream — and looked up again
// after HoldBack. A stream that cannot be read is admitted too, and listed
// by Unchecked.
func (g *Guard) Admit(ctx context.Context, subject string) error {
	if g.mode == GuardOff {
		return nil
	}
	// admitTimeout bounds the lookups only: the path of a known subject and
	// stream, every row's, makes no context (a timer per row was 7 % of
	// the relay's CPU in a bridge-bench profile).
	var lookup context.Context
	cancel := context.CancelFunc(func() {})
	defer func() { cancel() }()
	bounded := func() context.Context {
		if lookup == nil {
			lookup, cancel = context.WithTimeout(ctx, admitTimeout)
		}
		return lookup
	}
	var name string
	if v, ok := g.subjects.Load(subject); ok && (v.(resolution).name != "" || time.Now().Before(v.(resolution).retry)) {
		name = v.(resolution).name
	} else {
		n, err := g.lookUp(bounded(), subject)
		if err != nil {
			g.subjects.Store(subject, resolution{retry: time.Now().Add(HoldBack)})
			return nil
		}
		name = n
		g.subjects.Store(subject, resolution{name: name})
		g.Observe(name)
	}
	if name == "" {
		return nil
	}
	g.mu.Lock()
	v := g.verdicts[name]
	g.mu.Unlock()
	unsafe := (*UnsafeStreamError)(nil)
	if v != nil && (v.unsafe == nil || time.Since(v.at) < HoldBack) {
		unsafe = v.unsafe
	} else {
		u, err := g.inspectStream(bounded(), name)
		if err != nil {
			return nil
		}
		unsafe = u
	}
	if unsafe == nil {
		return nil
	}
	g.report(unsafe)
	if g.mode == GuardRefuse {
		return unsafe
	}
	return nil
}

// lookUp asks the JetStream API for the stream of subject, and failing
// that the routes PubAcks taught. A lookup that fails because the API does
// not answer (or the relay's NATS user may not use it) is listed by
// Unchecked until a lookup of the subject answers. One that fails for the
// subject's own sake (a subject the client refuses to send, such as
// "a.b>c", which a publish may still carry) is not: no answer of the API
// would change it, and the row's publish tells.
func (g *Guard) lookUp(ctx context.Context, subject string) (string, error) {
	name, err := g.js.StreamNameBySubject(ctx, subject)
	switch {
	case apiFailed(err):
		if errors.Is(err, context.Canceled) {
			break // the guard stops: no finding
		}
		g.mu.Lock()
		if _, ok := g.lookups[subject]; ok || len(g.lookups) < maxLookups {
			g.lookups[subject] = fmt.Errorf("look up the stream of subject %.80s: %w", subject, err)
		}
		g.mu.Unlock()
	case errors.Is(err, jetstream.ErrStreamNotFound):
		g.lookupAnswered(subject)
		if routed, ok := g.routes.Stream(subject); ok {
			return routed, nil
		}
	default: // the stream, or the subject's own error
		g.lookupAnswered(subject)
	}
	return name, err
}

// apiFailed reports whether err, a lookup's, is the JetStream API's failure
// to answer it (or to allow it), not an answer about the subject: no
// stream captures it (jetstream.ErrStreamNotFound), or the client refuses
// to send it (jetstream.ErrInvalidSubject).
func apiFailed(err error) bool {
	return err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrInvalidSubject)
}

// lookupAnswered drops subject from the failed lookups.
func (g *Guard) lookupAnswered(subject string) {
	g.mu.Lock()
	delete(g.lookups, subject)
	g.mu.Unlock()
}

// failedLookups returns the subjects whose stream could not be looked up.
func (g *Guard) failedLookups() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.lookups))
}

// maxLookups bounds the failed lookups kept to be tried again: a relay of
// many subjects cut off from the JetStream API remembers the first
// thousand, whose lookups answering again tells that the API does.
const maxLookups = 1000

// maxListedLookups bounds the failed lookups Unchecked names one by one:
// a relay of many subjects cut off from the JetStream API would otherwise
// put every one of them in its readiness detail.
const maxListedLookups = 3

// Unchecked says, per stream, why the guard cannot check it now (the
// stream cannot be read: the JetStream API does not answer, or the relay's
// NATS user may not use it), in stream order, then the subjects whose
// stream could not be looked up (the first maxListedLookups in subject
// order, and how many more). Such streams are not held back: their rows
// are published unchecked. Empty when every stream was checked and every
// lookup answered; Run tries the failed ones again every HoldBack.
func (g *Guard) Unchecked() []string {
	if g.mode == GuardOff {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.unchecked)+min(len(g.lookups), maxListedLookups+1))
	for name, err := range g.unchecked {
		out = append(out, "stream "+name+": "+err.Error())
	}
	slices.Sort(out)
	subjects := slices.Sorted(maps.Keys(g.lookups))
	for _, subject := range subjects[:min(len(subjects), maxListedLookups)] {
		out = append(out, g.lookups[subject].Error())
	}
	if more := len(subjects) - maxListedLookups; more > 0 {
		out = append(out, fmt.Sprintf("and the lookups of %d more subjects", more))
	}
	return out
}

// report logs and counts a finding, once per stream and problem.
func (g *Guard) report(unsafe *UnsafeStreamError) {
	key := unsafe.Stream + "\x00" + unsafe.Problem
	g.mu.Lock()
	first := !g.logged[key]
	g.logged[key] = true
	g.mu.Unlock()
	if !first {
		return
	}
	g.Violations.Add(1)
	if g.mode == GuardRefuse {
		g.logger.Error("dedup guard: stream cannot deduplicate republishes; holding back its rows, the other streams flow",
			slog.String("stream", unsafe.Stream), slog.String("problem", unsafe.Problem), slog.String("fix", unsafe.Fix),
			slog.Duration("retry_every", HoldBack))
		return
	}
	g.logger.Warn("dedup guard: stream cannot deduplicate republishes", slog.String("stream", unsafe.Stream),
		slog.String("problem", unsafe.Problem), slog.String("fix", unsafe.Fix))
}

// Unsafe returns the streams whose rows are held back now (refuse mode),
// by name; nil when none.
func (g *Guard) Unsafe() []*UnsafeStreamError {
	if g.mode != GuardRefuse {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*UnsafeStreamError
	for _, v := range g.verdicts {
		if v.unsafe != nil {
			out = append(out, v.unsafe)
		}
	}
	slices.SortFunc(out, func(a, b *UnsafeStreamError) int { return strings.Compare(a.Stream, b.Stream) })
	return out
}

// Run inspects the known streams every interval until ctx ends, so that a
// stream changed by an operator is seen: made unsafe, its rows are held
// back from then on; made safe, they flow again; deleted, its verdict is
// dropped. The streams found unsafe or unreadable, and the subjects whose
// stream could not be looked up, are tried again every HoldBack (or
// interval, when shorter), so that what Unsafe and Unchecked say —
// readiness — follows a fixed stream or a JetStream API that answers again
// within that long even when none of their rows waits to be admitted. It
// never stops the relay.
func (g *Guard) Run(ctx context.Context, interval time.Duration) {
	if g.mode == GuardOff {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	recheck := time.NewTicker(min(g.recheck, interval))
	defer recheck.Stop()
	for {
		var names []string
		full := false
		select {
		case <-ctx.Done():
			return
		case <-recheck.C:
			names = append(g.lookUpAgain(ctx), g.troubled()...)
		case <-t.C:
			g.subjects.Clear()
			names, full = append(g.lookUpAgain(ctx), g.streams()...), true
		}
		slices.Sort(names)
		for _, name := range slices.Compact(names) {
			unsafe, err := g.inspectStream(ctx, name)
			switch {
			case errors.Is(err, jetstream.ErrStreamNotFound):
			case err != nil && ctx.Err() == nil && full: // logged once an interval
				g.logger.Warn("dedup guard: cannot read stream", slog.String("stream", name), slog.Any("error", err))
			case unsafe != nil:
				g.report(unsafe)
			}
		}
	}
}
