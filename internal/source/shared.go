package source

import (
	"context"
	"errors"
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
