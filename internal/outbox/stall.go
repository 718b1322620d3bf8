package outbox

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
}

// StallWatch tells a stalled relay: a row has been claimable for longer
// than After and this relay has claimed nothing for as long. "Claimable"
// is what a claim would take: pending or failed, its available_at passed,
// no earlier row of its ordering key pending, in flight or failed — so an
// empty table, rows waiting out a backoff however long, and rows queued
// behind such a row never make a stall. While the relay claims rows,
// nothing is asked of the database.
//
// A stalled relay is one that nothing else reports: its connections look
// up, its probes answer, and rows wait. It is logged once per stall,
// shown by bridge_relay_stalled_seconds, and after UnhealthyAfter by
// Alive.
type StallWatch struct {
	store  *Store
	sub    *Subscriber
	cfg    StallConfig
	logger *slog.Logger

	since atomic.Int64 // unix nanoseconds when the stall was found; 0: not stalled
}

// NewStallWatch watches the claims of sub on store. The config is copied;
// zero fields take their defaults.
func NewStallWatch(store *Store, sub *Subscriber, logger *slog.Logger, cfg StallConfig) *StallWatch {
	cfg.After = cmp.Or(cfg.After, StallAfterDefault)
	cfg.UnhealthyAfter = cmp.Or(cfg.UnhealthyAfter, StallUnhealthyAfterDefault)
	return &StallWatch{store: store, sub: sub, cfg: cfg, logger: logger.With(slog.String("component", "outbox"))}
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
	idle := time.Since(w.sub.LastClaim())
	if idle < w.cfg.After {
		w.clear()
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stalled, err := w.store.Stalled(ctx, w.cfg.After)
	if err != nil {
		// A database that cannot answer fails readiness already.
		w.logger.Debug("stall check failed", slog.Any("error", err))
		return
	}
	if !stalled {
		w.clear()
		return
	}
	if w.since.CompareAndSwap(0, time.Now().UnixNano()) {
		w.logger.Error("relay stalled: rows have been claimable for longer than relay.stall_after and this relay claimed none",
			slog.Duration("stall_after", w.cfg.After), slog.Duration("claimed_nothing_for", idle.Round(time.Second)),
			slog.Duration("unhealthy_after", w.cfg.UnhealthyAfter))
	}
}

func (w *StallWatch) clear() {
	if since := w.since.Swap(0); since != 0 {
		w.logger.Info("relay claims rows again after a stall", slog.Duration("stalled_for", time.Since(time.Unix(0, since)).Round(time.Second)))
	}
}

// Inherit takes over the stall prev (the watch of an earlier relay of this
// process) found, so that a stall lasts across rebuilds of the relay.
func (w *StallWatch) Inherit(prev *StallWatch) { w.since.Store(prev.since.Load()) }

// Stalled returns how long the relay has been stalled; 0 when it is not.
func (w *StallWatch) Stalled() time.Duration {
	since := w.since.Load()
	if since == 0 {
		return 0
	}
	return time.Since(time.Unix(0, since))
}

// Alive returns an error when the relay has been stalled for
// UnhealthyAfter or longer while its claims do not fail.
//
// The rule of liveness: it fails only for what a restart can heal, a relay
// stuck in itself. A stall while the claims fail is the database's doing
// — it cannot be reached, it refuses the relay's writes (read-only, after
// a failover), a privilege is missing — and a restart would not change
// it: readiness fails (Subscriber.Ready, the database check) and names
// it, liveness does not, so that an orchestrator does not restart the relay
// in a loop for as long as the database is down or read-only.
func (w *StallWatch) Alive(context.Context) error {
	if w.sub.ClaimsFailing() {
		return nil
	}
	if d := w.Stalled(); w.cfg.UnhealthyAfter >= 0 && d > 0 && d >= w.cfg.UnhealthyAfter {
		return fmt.Errorf("stalled for %s: rows are claimable and the relay claims none (relay.stall_after %s, relay.stall_unhealthy_after %s)",
			d.Round(time.Second), w.cfg.After, w.cfg.UnhealthyAfter)
	}
	return nil
}

// Collector exposes the gauge bridge_relay_stalled_seconds.
func (w *StallWatch) Collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_relay_stalled_seconds",
		Help: "How long the relay has been stalled: rows claimable for longer than relay.stall_after while it claimed none; 0 when it is not."},
		func() float64 { return w.Stalled().Seconds() })
}
