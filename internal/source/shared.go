package source

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/outbox-bridge/bridge/internal/dedup"
)

// Defaults every source of the bridge table shares.
const (
	// DrainTimeoutDefault bounds how long a source waits, as it closes, for
	// the outcomes of the rows it handed on.
	DrainTimeoutDefault = 20 * time.Second
	// HoldBackDefault is how long a row whose publish failed with class
	// Held waits before it is tried again; its attempt is not counted.
	HoldBackDefault = 15 * time.Second
)

// ErrClosed is returned by a source's Subscribe after Close.
var ErrClosed = errors.New("outbox subscriber closed")

// Reconciler settles rows whose earlier publish may have been stored beyond
// the duplicate window; see dedup.Reconciler.
type Reconciler interface {
	InDoubt(ctx context.Context, c dedup.Candidate) (bool, error)
	Reconcile(ctx context.Context, candidates []dedup.Candidate) (map[int64]dedup.Stored, error)
}

// FindInDoubt reconciles the candidates r.InDoubt judges in doubt and
// returns those found in their streams, by row id, and how many were in
// doubt (0: no stream was scanned); the caller publishes the others as
// usual. A candidate InDoubt cannot judge is left out (a warning each), and
// every one when Reconcile fails (a warning); logger and what ("sweep",
// "reconcile", …) name the caller in those lines and in the one that
// counts the rows in doubt and found.
func FindInDoubt(ctx context.Context, r Reconciler, candidates []dedup.Candidate, logger *slog.Logger, what string) (found map[int64]dedup.Stored, doubted int) {
	var doubt []dedup.Candidate
	for _, c := range candidates {
		in, err := r.InDoubt(ctx, c)
		if err != nil {
			logger.Warn(what+": cannot tell whether the row is in doubt; publishing it", slog.Int64("row_id", c.ID), slog.Any("error", err))
			continue
		}
		if in {
			doubt = append(doubt, c)
		}
	}
	if len(doubt) == 0 {
		return nil, 0
	}
	found, err := r.Reconcile(ctx, doubt)
	if err != nil {
		logger.Warn(what+": reconcile failed; publishing the rows in doubt", slog.Int("rows", len(doubt)), slog.Any("error", err))
		return nil, len(doubt)
	}
	logger.Info(what+": rows read again reconciled against their streams", slog.Int("in_doubt", len(doubt)), slog.Int("found", len(found)))
	return found, len(doubt)
}

// Backoff is the wait before attempt+1 of a failed row: initial doubled
// per attempt, capped at most, then scaled by a random factor in [0.5, 1)
// so that failing rows spread out.
func Backoff(attempt int, initial, most time.Duration) time.Duration {
	d := initial
	for i := 1; i < attempt && d < most; i++ {
		d *= 2
	}
	d = min(d, most)
	return time.Duration(float64(d) * (0.5 + rand.Float64()/2))
}
