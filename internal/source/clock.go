package source

import (
	"sync"
	"time"
)

// Clock is the time a source's services read (after river's
// rivershared/baseservice time generator): RealClock outside tests; a test
// injects a ManualClock to move time without waiting for it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// RealClock is the machine's clock.
var RealClock Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told (Advance). Safe
// for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock at now.
func NewManualClock(now time.Time) *ManualClock { return &ManualClock{now: now} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
