package source

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/config"
)

// Defaults of StallConfig: those of relay.stall_after and
// relay.stall_unhealthy_after.
const (
	StallAfterDefault          = config.StallAfterDefault
	StallUnhealthyAfterDefault = config.StallUnhealthyAfterDefault
)

// StallConfig configures a StallWatch.
type StallConfig struct {
	// After is how long a row may stay claimable while the relay claims
	// nothing before the relay counts as stalled. Defaults to 1m.
	After time.Duration
	// UnhealthyAfter is how long the relay may stay stalled before Alive
	// fails (liveness: an orchestrator restarts the process); negative
	// means never. Defaults to 5m.
	UnhealthyAfter time.Duration
	// Clock tells the time. Defaults to RealClock.
	Clock Clock
}

// StallSource is what a StallWatch asks of a relay's source: whether rows
// move, and whether rows wait while none does.
type StallSource interface {
	// LastProgress is when the relay last moved rows (source: table: a
	// claim that took rows).
	LastProgress() time.Time
	// Stalled is asked once nothing moved for after: whether rows have
	// waited for longer than after that this relay (or, for a standby,
	// whoever holds what it waits for) should be relaying, and what keeps
	// them (the log line's cause). Rows waiting out a backoff, and an
	// empty table, never make a stall. An error means it cannot tell.
	Stalled(ctx context.Context, after time.Duration) (stalled bool, cause string, err error)
	// Excuse says why liveness must not fail for the stall it is in, or
	// "" when it must: a stall whose cause is outside the process, which
	// a restart would not change.
	Excuse() string
}

// StallWatch tells a stalled relay: rows have waited for longer than
// After and the relay has moved none for as long (see StallSource). For
// the bridge table (the table source) "waited" is "claimable": pending or
// failed, its available_at passed, no earlier row of its ordering key
// pending, in flight or failed — so an empty table, rows waiting out a
// backoff however long, and rows queued behind such a row never make a
// stall. While the relay moves rows, nothing is asked of the database.
//
// A stalled relay is one that nothing else reports: its connections look
// up, its probes answer, and rows wait. It is logged once per stall (and
// again when its cause changes), shown by bridge_relay_stalled_seconds,
// and after UnhealthyAfter by Alive.
type StallWatch struct {
	src    StallSource
	cfg    StallConfig
	logger *slog.Logger

	since atomic.Int64 // unix nanoseconds when the stall was found; 0: not stalled
	cause atomic.Pointer[string]
	// heldBy, when set, names the rows held for the broker (see HeldBy).
	heldBy atomic.Pointer[func() (string, time.Time)]
}

// HeldBy tells the watch who holds rows outside the relay: held returns
// what holds them in words (broker.Keeper.Outage: streams without a leader)
// and since when, or "". Rows held for longer than After are a stall even
// though the relay claims them again and again (each claim publishes
// nothing), with held's words as its cause; liveness does not fail for it
// (a restart does not bring a stream's leader back). Call it before Run.
func (w *StallWatch) HeldBy(held func() (string, time.Time)) { w.heldBy.Store(&held) }

// held returns what holds rows for longer than After, or "".
func (w *StallWatch) held() string {
	f := w.heldBy.Load()
	if f == nil {
		return ""
	}
	cause, since := (*f)()
	if cause == "" || w.elapsed(since) < w.cfg.After {
		return ""
	}
	return "rows held for the broker: " + cause
}

// NewStallWatch watches src, logging through logger. The config is
// copied; zero fields take their defaults.
func NewStallWatch(src StallSource, logger *slog.Logger, cfg StallConfig) *StallWatch {
	cfg.After = cmp.Or(cfg.After, StallAfterDefault)
	cfg.UnhealthyAfter = cmp.Or(cfg.UnhealthyAfter, StallUnhealthyAfterDefault)
	if cfg.Clock == nil {
		cfg.Clock = RealClock
	}
	return &StallWatch{src: src, cfg: cfg, logger: logger}
}

// Run checks until ctx ends, every quarter of After (at most every 15 s).
func (w *StallWatch) Run(ctx context.Context) {
	t := time.NewTicker(min(w.cfg.After/4, 15*time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.check(ctx)
		}
	}
}

func (w *StallWatch) check(ctx context.Context) {
	if cause := w.held(); cause != "" {
		w.stalled(cause, w.cfg.After)
		return
	}
	idle := w.elapsed(w.src.LastProgress())
	if idle < w.cfg.After {
		w.clear()
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stalled, cause, err := w.src.Stalled(ctx, w.cfg.After)
	if err != nil {
		// A database that cannot answer fails readiness already.
		w.logger.Debug("stall check failed", slog.Any("error", err))
		return
	}
	if !stalled {
		w.clear()
		return
	}
	w.stalled(cause, idle)
}

// stalled records a stall of cause, logging it when it starts or its
// cause changes.
func (w *StallWatch) stalled(cause string, idle time.Duration) {
	w.since.CompareAndSwap(0, w.cfg.Clock.Now().UnixNano())
	if prev := w.cause.Swap(&cause); prev == nil || *prev != cause {
		w.logger.Error("relay stalled: "+cause,
			slog.String("cause", cause), slog.Duration("stall_after", w.cfg.After), slog.Duration("moved_nothing_for", idle.Round(time.Second)),
			slog.Duration("unhealthy_after", w.cfg.UnhealthyAfter), slog.Bool("liveness_fails", w.excuse() == "" && w.cfg.UnhealthyAfter >= 0))
	}
}

// excuse is the source's excuse, or the broker's hold.
func (w *StallWatch) excuse() string {
	if cause := w.held(); cause != "" {
		return cause
	}
	return w.src.Excuse()
}

func (w *StallWatch) clear() {
	w.cause.Store(nil)
	if since := w.since.Swap(0); since != 0 {
		w.logger.Info("relay moves rows again after a stall", slog.Duration("stalled_for", w.elapsed(time.Unix(0, since)).Round(time.Second)))
	}
}

// Inherit takes over the stall prev (the watch of an earlier relay of this
// process) found, so that a stall lasts across rebuilds of the relay.
func (w *StallWatch) Inherit(prev *StallWatch) {
	w.since.Store(prev.since.Load())
	w.cause.Store(prev.cause.Load())
}

// Stalled returns how long the relay has been stalled; 0 when it is not.
func (w *StallWatch) Stalled() time.Duration {
	since := w.since.Load()
	if since == 0 {
		return 0
	}
	return w.elapsed(time.Unix(0, since))
}

// elapsed is the time elapsed since t on the watch's clock.
func (w *StallWatch) elapsed(t time.Time) time.Duration { return w.cfg.Clock.Now().Sub(t) }

// Alive returns an error when the relay has been stalled for
// UnhealthyAfter or longer, unless its source excuses the stall.
//
// The rule of liveness: it fails only for what a restart can heal, a relay
// stuck in itself. A stall whose cause is outside the process (the
// database refuses the claims; another process holds a replication slot)
// is not healed by a restart: readiness or the stall's log line and
// /readyz detail name it, liveness does not fail, so that an orchestrator
// does not restart the relay in a loop for as long as the cause lasts.
func (w *StallWatch) Alive(context.Context) error {
	if w.excuse() != "" {
		return nil
	}
	if d := w.Stalled(); w.cfg.UnhealthyAfter >= 0 && d > 0 && d >= w.cfg.UnhealthyAfter {
		cause := "rows wait and the relay moves none"
		if c := w.cause.Load(); c != nil {
			cause = *c
		}
		return fmt.Errorf("stalled for %s: %s (relay.stall_after %s, relay.stall_unhealthy_after %s)",
			d.Round(time.Second), cause, w.cfg.After, w.cfg.UnhealthyAfter)
	}
	return nil
}

// Collector exposes the gauge bridge_relay_stalled_seconds.
func (w *StallWatch) Collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_relay_stalled_seconds",
		Help: "How long the relay has been stalled: rows waiting (claimable; postgres-wal: unrelayed) for longer than relay.stall_after while it moved none; 0 when it is not."},
		func() float64 { return w.Stalled().Seconds() })
}
