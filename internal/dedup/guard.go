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

// GuardMode says what the duplicate-window guard does about an unsafe
// stream.
type GuardMode string

// The guard modes (configuration key dedup.guard).
const (
	GuardRefuse GuardMode = "refuse" // refuse to start (exit 2), or stop when found later
	GuardWarn   GuardMode = "warn"   // log once per stream and problem, and count
	GuardOff    GuardMode = "off"    // do not check
)

// GuardIntervalDefault is how often a running relay checks its streams again.
const GuardIntervalDefault = time.Minute

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
type Guard struct {
	js      jetstream.JetStream
	mode    GuardMode
	horizon time.Duration
	logger  *slog.Logger

	mu      sync.Mutex
	seen    []string
	warned  map[string]bool
	refused chan error // an unsafe stream found by Admit in refuse mode

	admitted sync.Map // subject → struct{}: its stream passed Admit

	// Violations counts unsafe findings (each stream and problem once).
	Violations atomic.Int64
}

// NewGuard returns a guard for streams; more are added with Observe.
// Errors: an unknown mode.
func NewGuard(js jetstream.JetStream, mode GuardMode, horizon time.Duration, streams []string, logger *slog.Logger) (*Guard, error) {
	switch mode {
	case GuardRefuse, GuardWarn, GuardOff:
	default:
		return nil, fmt.Errorf("invalid config: dedup.guard: %q: must be refuse, warn or off", mode)
	}
	return &Guard{js: js, mode: mode, horizon: horizon, logger: logger, seen: slices.Clone(streams), warned: map[string]bool{},
		refused: make(chan error, 1)}, nil
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

// Check inspects every known stream once. In refuse mode it returns the
// first *UnsafeStreamError; in warn mode it logs each finding once and
// returns nil. A stream that cannot be read is logged and skipped.
func (g *Guard) Check(ctx context.Context) error {
	if g.mode == GuardOff {
		return nil
	}
	g.mu.Lock()
	streams := slices.Clone(g.seen)
	g.mu.Unlock()
	for _, name := range streams {
		s, err := g.js.Stream(ctx, name)
		if err != nil {
			g.logger.Warn("dedup guard: cannot read stream", slog.String("stream", name), slog.Any("error", err))
			continue
		}
		unsafe := g.inspect(name, s.CachedInfo().Config)
		if unsafe == nil {
			continue
		}
		if g.mode == GuardRefuse {
			g.Violations.Add(1)
			return unsafe
		}
		g.warn(name, unsafe)
	}
	return nil
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

// Admit is asked before a message is published to subject. The first time
// a subject is seen, it finds the subject's stream and inspects it; later
// calls are a map lookup. In refuse mode an unsafe stream returns its
// *UnsafeStreamError (nothing is published to it) and makes Run stop the
// relay; in warn mode it is logged once and admitted. A subject that no
// stream captures is admitted: the publish itself fails then.
func (g *Guard) Admit(ctx context.Context, subject string) error {
	if g.mode == GuardOff {
		return nil
	}
	if _, ok := g.admitted.Load(subject); ok {
		return nil
	}
	name, err := g.js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return nil
	}
	s, err := g.js.Stream(ctx, name)
	if err != nil {
		return nil
	}
	g.Observe(name)
	if unsafe := g.inspect(name, s.CachedInfo().Config); unsafe != nil {
		if g.mode == GuardRefuse {
			g.Violations.Add(1)
			select {
			case g.refused <- unsafe:
			default:
			}
			return unsafe
		}
		g.warn(name, unsafe)
	}
	g.admitted.Store(subject, struct{}{})
	return nil
}

func (g *Guard) warn(name string, unsafe *UnsafeStreamError) {
	g.mu.Lock()
	first := !g.warned[name+unsafe.Problem]
	g.warned[name+unsafe.Problem] = true
	g.mu.Unlock()
	if first {
		g.Violations.Add(1)
		g.logger.Warn("dedup guard: stream cannot deduplicate republishes", slog.String("stream", name),
			slog.String("problem", unsafe.Problem), slog.String("fix", unsafe.Fix))
	}
}

// Run checks the streams every interval until ctx ends. In refuse mode it
// returns the first *UnsafeStreamError, found by a check or by Admit, so
// the relay stops.
func (g *Guard) Run(ctx context.Context, interval time.Duration) error {
	if g.mode == GuardOff {
		return nil
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-g.refused:
			return err
		case <-t.C:
		}
		if err := g.Check(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
}
