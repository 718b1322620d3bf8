package dedup

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// GuardMode says what the duplicate-window guard does about an unsafe
// stream.
type GuardMode string

// The guard modes (configuration key dedup.guard).
const (
	GuardRefuse GuardMode = "refuse" // refuse to start (exit 2) for an ensured stream; hold back the rows of one found later
	GuardWarn   GuardMode = "warn"   // log once per stream and problem, and count
	GuardOff    GuardMode = "off"    // do not check
)

// GuardIntervalDefault is how often a running relay checks its streams again.
const GuardIntervalDefault = time.Minute

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
// In refuse mode a stream found unsafe while the relay runs does not stop
// the relay: Admit refuses the subjects it captures, their rows are held
// back (see HoldBack), and every other stream keeps flowing. Each finding
// is logged once per stream and problem, counted, and listed by Unsafe.
type Guard struct {
	js      jetstream.JetStream
	mode    GuardMode
	horizon time.Duration
	logger  *slog.Logger

	mu       sync.Mutex
	seen     []string
	logged   map[string]bool     // stream + problem logged (and counted) once
	verdicts map[string]*verdict // stream name → last inspection

	subjects sync.Map // subject → stream name; cleared at every periodic check

	// Violations counts unsafe findings (each stream and problem once).
	Violations atomic.Int64
}

// verdict is the result of inspecting one stream.
type verdict struct {
	unsafe *UnsafeStreamError // nil: safe
	at     time.Time
}

// NewGuard returns a guard for streams; more are added with Observe.
// Errors: an unknown mode.
func NewGuard(js jetstream.JetStream, mode GuardMode, horizon time.Duration, streams []string, logger *slog.Logger) (*Guard, error) {
	switch mode {
	case GuardRefuse, GuardWarn, GuardOff:
	default:
		return nil, fmt.Errorf("invalid config: dedup.guard: %q: must be refuse, warn or off", mode)
	}
	return &Guard{js: js, mode: mode, horizon: horizon, logger: logger, seen: slices.Clone(streams),
		logged: map[string]bool{}, verdicts: map[string]*verdict{}}, nil
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

// Check inspects every known stream once: at start, the streams the relay
// ensures. In refuse mode it returns the first *UnsafeStreamError (a
// configuration error: the relay does not start); in warn mode it logs
// each finding once and returns nil. A stream that cannot be read is
// logged and skipped.
func (g *Guard) Check(ctx context.Context) error {
	if g.mode == GuardOff {
		return nil
	}
	for _, name := range g.streams() {
		unsafe, err := g.inspectStream(ctx, name)
		if err != nil {
			g.logger.Warn("dedup guard: cannot read stream", slog.String("stream", name), slog.Any("error", err))
			continue
		}
		if unsafe == nil {
			continue
		}
		if g.mode == GuardRefuse {
			g.Violations.Add(1)
			return unsafe
		}
		g.report(unsafe)
	}
	return nil
}

func (g *Guard) streams() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.seen)
}

// inspectStream reads stream name and records its verdict.
func (g *Guard) inspectStream(ctx context.Context, name string) (*UnsafeStreamError, error) {
	s, err := g.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	unsafe := g.inspect(name, s.CachedInfo().Config)
	g.mu.Lock()
	prev := g.verdicts[name]
	g.verdicts[name] = &verdict{unsafe: unsafe, at: time.Now()}
	g.mu.Unlock()
	if unsafe == nil && prev != nil && prev.unsafe != nil && g.mode == GuardRefuse {
		g.logger.Info("dedup guard: stream is safe now; its rows are relayed again", slog.String("stream", name))
	}
	return unsafe, nil
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
// attempt. In warn mode an unsafe stream is logged once and admitted. A
// subject that no stream captures, or a stream that cannot be read, is
// admitted: the publish itself fails then.
func (g *Guard) Admit(ctx context.Context, subject string) error {
	if g.mode == GuardOff {
		return nil
	}
	var name string
	if v, ok := g.subjects.Load(subject); ok {
		name = v.(string)
	} else {
		n, err := g.js.StreamNameBySubject(ctx, subject)
		if err != nil {
			return nil
		}
		name = n
		g.subjects.Store(subject, name)
		g.Observe(name)
	}
	g.mu.Lock()
	v := g.verdicts[name]
	g.mu.Unlock()
	unsafe := (*UnsafeStreamError)(nil)
	if v != nil && (v.unsafe == nil || time.Since(v.at) < HoldBack) {
		unsafe = v.unsafe
	} else {
		u, err := g.inspectStream(ctx, name)
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
// back from then on; made safe, they flow again. It never stops the relay.
func (g *Guard) Run(ctx context.Context, interval time.Duration) {
	if g.mode == GuardOff {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.subjects.Clear()
		for _, name := range g.streams() {
			unsafe, err := g.inspectStream(ctx, name)
			switch {
			case err != nil && ctx.Err() == nil:
				g.logger.Warn("dedup guard: cannot read stream", slog.String("stream", name), slog.Any("error", err))
			case unsafe != nil:
				g.report(unsafe)
			}
		}
	}
}
