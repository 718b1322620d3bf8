package source

import (
	"fmt"
	"sync"
	"time"
)

// FailingAfter is how many statements of a loop in a row must fail before
// readiness fails: one failure is a blip that the next try fixes, three
// are a database that does not serve the relay — whatever the cause,
// unreachable, read-only, a privilege missing (42501), a pooler mode that
// refuses the relay's statements.
const FailingAfter = 3

// LoopHealth is the recent record of one of a relay's loops of statements
// (the table source's claims, any source's writes of marks): how many
// tries failed in a row, since when and why, and whether a statement runs
// now and since when. The zero value is a loop that has not run. Safe for
// concurrent use.
type LoopHealth struct {
	mu       sync.Mutex
	failures int
	since    time.Time // of the first failure in a row
	last     error
	running  time.Time // start of the statement in progress; zero when none
}

// Begin records the start of a statement.
func (h *LoopHealth) Begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running = time.Now()
}

// End records the outcome of the statement begun last: err nil resets the
// failures.
func (h *LoopHealth) End(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running = time.Time{}
	if err == nil {
		h.failures, h.last = 0, nil
		return
	}
	if h.failures == 0 {
		h.since = time.Now()
	}
	h.failures++
	h.last = err
}

// Failing reports whether the last FailingAfter tries or more failed.
func (h *LoopHealth) Failing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failures >= FailingAfter
}

// Running is how long the statement in progress has run; 0 when none.
func (h *LoopHealth) Running() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running.IsZero() {
		return 0
	}
	return time.Since(h.running)
}

// Check returns an error naming what, when FailingAfter tries in a row
// failed, or when a statement has run for longer than after (the database
// holds it: a lock, a slow disk, a server that stopped answering); nil
// otherwise.
func (h *LoopHealth) Check(what string, after time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running.IsZero() {
		if d := time.Since(h.running); d > after {
			return fmt.Errorf("%s: a statement has waited %s for the database, more than %s", what, d.Round(time.Second), after)
		}
	}
	if h.failures >= FailingAfter {
		return fmt.Errorf("%s failing: %d in a row for %s; last: %w", what, h.failures, time.Since(h.since).Round(time.Second), h.last)
	}
	return nil
}
