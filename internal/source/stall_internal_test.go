package source

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeStallSource is a StallSource a test sets: when rows last moved,
// whether rows wait, and the excuse.
type fakeStallSource struct {
	mu       sync.Mutex
	progress time.Time
	waiting  bool
	excuse   string
	asked    int // Stalled calls
}

func (f *fakeStallSource) LastProgress() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.progress
}

func (f *fakeStallSource) Stalled(context.Context, time.Duration) (bool, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	return f.waiting, "rows wait", nil
}

func (f *fakeStallSource) Excuse() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.excuse
}

func (f *fakeStallSource) set(fn func(f *fakeStallSource)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// newWatch returns a watch of a fake source on a manual clock: After 1 min,
// UnhealthyAfter 5 min.
func newWatch(t *testing.T) (*StallWatch, *fakeStallSource, *ManualClock) {
	t.Helper()
	clock := NewManualClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	src := &fakeStallSource{progress: clock.Now()}
	w := NewStallWatch(src, slog.New(slog.DiscardHandler), StallConfig{After: time.Minute, UnhealthyAfter: 5 * time.Minute, Clock: clock})
	return w, src, clock
}

// TestStallWatchFindsAStallOnlyPastAfter: while rows moved within After
// the source is not even asked; past it, a stall is found when rows wait,
// grows with the clock, fails liveness at UnhealthyAfter and ends when
// rows move again.
func TestStallWatchFindsAStallOnlyPastAfter(t *testing.T) {
	ctx := context.Background()
	w, src, clock := newWatch(t)
	src.set(func(f *fakeStallSource) { f.waiting = true })

	clock.Advance(59 * time.Second)
	w.check(ctx)
	require.Zero(t, w.Stalled())
	require.Zero(t, src.asked, "rows moved within After: nothing asked of the source")

	clock.Advance(time.Second)
	w.check(ctx)
	require.Equal(t, 1, src.asked)
	require.Zero(t, w.Stalled(), "found at this moment")
	require.NoError(t, w.Alive(ctx))

	clock.Advance(4*time.Minute + 59*time.Second)
	w.check(ctx)
	require.Equal(t, 4*time.Minute+59*time.Second, w.Stalled())
	require.NoError(t, w.Alive(ctx), "not yet UnhealthyAfter")
	clock.Advance(time.Second)
	require.ErrorContains(t, w.Alive(ctx), "stalled for 5m0s: rows wait")

	src.set(func(f *fakeStallSource) { f.progress = clock.Now() })
	w.check(ctx)
	require.Zero(t, w.Stalled(), "rows moved: the stall ends")
	require.Nil(t, w.cause.Load(), "its cause forgotten: the next stall is logged again")
	require.NoError(t, w.Alive(ctx))
}

// TestStallWatchNoRowsWaiting: rows not moving while none waits (an empty
// table, rows in a backoff) is no stall, however long.
func TestStallWatchNoRowsWaiting(t *testing.T) {
	ctx := context.Background()
	w, src, clock := newWatch(t)
	clock.Advance(time.Hour)
	w.check(ctx)
	require.Equal(t, 1, src.asked)
	require.Zero(t, w.Stalled())
	require.NoError(t, w.Alive(ctx))
}

// TestStallWatchExcuseKeepsLiveness: a stall the source excuses (its
// claims fail: the database's doing) is reported but never fails
// liveness; with UnhealthyAfter negative no stall does.
func TestStallWatchExcuseKeepsLiveness(t *testing.T) {
	ctx := context.Background()
	w, src, clock := newWatch(t)
	src.set(func(f *fakeStallSource) { f.waiting, f.excuse = true, "the claims fail" })
	clock.Advance(time.Minute)
	w.check(ctx)
	clock.Advance(time.Hour)
	require.Equal(t, time.Hour, w.Stalled())
	require.NoError(t, w.Alive(ctx), "excused")

	never := NewStallWatch(src, slog.New(slog.DiscardHandler), StallConfig{After: time.Minute, UnhealthyAfter: -1, Clock: clock})
	src.set(func(f *fakeStallSource) { f.excuse = "" })
	never.check(ctx)
	clock.Advance(time.Hour)
	require.Equal(t, time.Hour, never.Stalled())
	require.NoError(t, never.Alive(ctx), "UnhealthyAfter negative: never unhealthy")
}

// TestStallWatchHeldByTheBroker: rows held for the broker (streams
// without a leader) for longer than After are a stall with the broker's
// words as its cause, even though the relay moved rows just now, and
// liveness does not fail for it (a restart brings no leader back).
func TestStallWatchHeldByTheBroker(t *testing.T) {
	ctx := context.Background()
	w, src, clock := newWatch(t)
	outageSince := clock.Now()
	w.HeldBy(func() (string, time.Time) { return "stream EVENTS has no leader", outageSince })

	clock.Advance(30 * time.Second)
	src.set(func(f *fakeStallSource) { f.progress = clock.Now() })
	w.check(ctx)
	require.Zero(t, w.Stalled(), "held for less than After")

	clock.Advance(30 * time.Second) // held for exactly After
	src.set(func(f *fakeStallSource) { f.progress = clock.Now() })
	w.check(ctx)
	require.NotNil(t, w.cause.Load(), "held for After: a stall")
	clock.Advance(10 * time.Minute)
	require.Equal(t, 10*time.Minute, w.Stalled())
	require.Equal(t, "rows held for the broker: stream EVENTS has no leader", *w.cause.Load())
	require.NoError(t, w.Alive(ctx), "the broker's hold excuses liveness")
	require.Zero(t, src.asked, "the hold decides: the source is not asked")
}

// TestStallWatchInheritKeepsTheStart: a rebuilt relay's watch goes on
// from when the stall began, not from the rebuild.
func TestStallWatchInheritKeepsTheStart(t *testing.T) {
	ctx := context.Background()
	w, src, clock := newWatch(t)
	src.set(func(f *fakeStallSource) { f.waiting = true })
	clock.Advance(time.Minute)
	w.check(ctx)
	clock.Advance(3 * time.Minute)

	next := NewStallWatch(src, slog.New(slog.DiscardHandler), StallConfig{After: time.Minute, UnhealthyAfter: 5 * time.Minute, Clock: clock})
	next.Inherit(w)
	require.Equal(t, 3*time.Minute, next.Stalled())
	clock.Advance(2 * time.Minute)
	require.Error(t, next.Alive(ctx), "5 min since the stall began, across the rebuild")
}
