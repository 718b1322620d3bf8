package table

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// failingAfter is how many claims (or settlement writes) in a row must fail
// before readiness fails: one failure is a blip that the next try fixes,
// three are a database that does not serve the relay — whatever the cause,
// unreachable, read-only, a privilege missing (42501), a pooler mode that
// refuses the relay's statements.
const failingAfter = 3

// statementTimeoutMin is the shortest statement deadline: a claim or a
// write of settlements takes milliseconds, but a loaded database (or a
// -race test machine) can take seconds, and a statement cut short is
// tried again from the start.
const statementTimeoutMin = 5 * time.Second

// statementTimeout bounds each of the relay's statements (a claim, a
// requeue, a write of settlements): a third of the lease
// (relay.inflight_timeout; 10 s by default), at least
// statementTimeoutMin, so that a statement that gets no answer gives up
// well before the lease of the rows in flight ends, and the relay tries
// again on new sessions.
func (c *SubscriberConfig) statementTimeout() time.Duration {
	return max(c.InflightTimeout/3, statementTimeoutMin)
}

// loopHealth is the recent record of one of the relay's loops (claims or
// settlement writes): how many tries failed in a row, since when and why,
// and whether a statement runs now and since when.
type loopHealth struct {
	mu       sync.Mutex
	failures int
	since    time.Time // of the first failure in a row
	last     error
	running  time.Time // start of the statement in progress; zero when none
}

func (h *loopHealth) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running = time.Now()
}

// end records the outcome of the statement begun last: err nil resets the
// failures.
func (h *loopHealth) end(err error) {
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

// failing reports whether the last failingAfter tries or more failed.
func (h *loopHealth) failing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failures >= failingAfter
}

// check returns an error naming what, when failingAfter tries in a row
// failed, or when a statement has run longer than limit (its deadline did
// not end it); nil otherwise.
func (h *loopHealth) check(what string, limit time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running.IsZero() {
		if d := time.Since(h.running); d > limit+time.Second {
			return fmt.Errorf("%s: a statement has run for %s, past its deadline of %s", what, d.Round(time.Second), limit)
		}
	}
	if h.failures >= failingAfter {
		return fmt.Errorf("%s failing: %d in a row for %s; last: %w", what, h.failures, time.Since(h.since).Round(time.Second), h.last)
	}
	return nil
}

// ErrStatementTimeout is wrapped by the errors of the relay's statements
// that got no answer within their deadline (relay.inflight_timeout / 3,
// at least 5 s).
var ErrStatementTimeout = errors.New("the database did not answer within the statement deadline")

// statement runs fn, one of the relay's statements, with a deadline of
// statementTimeout, and records its outcome in h. A statement that times
// out while ctx goes on means that the server stopped answering, or that
// its network did: the database's sessions opened until now are not reused
// (see outbox.DB.Abandon), so that the next statement runs on a new session,
// which reaches the server the address points to now.
func (s *Subscriber) statement(ctx context.Context, h *loopHealth, fn func(ctx context.Context) error) error {
	return runStatement(ctx, s.store.DB(), s.cfg.statementTimeout(), h, fn)
}

// runStatement is Subscriber.statement for any of the table source's
// services: fn runs on db within limit, its outcome recorded in h.
func runStatement(ctx context.Context, db *outbox.DB, limit time.Duration, h *loopHealth, fn func(ctx context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	h.begin()
	err := fn(sctx)
	if err != nil && sctx.Err() != nil && ctx.Err() == nil {
		db.Abandon()
		err = fmt.Errorf("%w (%s, a third of relay.inflight_timeout, at least 5s; the sessions opened until now are replaced): %w", ErrStatementTimeout, limit, err)
	}
	if ctx.Err() == nil {
		h.end(err)
	}
	return err
}

// Ready reports whether the relay's claims and settlement writes work:
// an error when failingAfter of them in a row failed (naming the last
// error) or when one has run past its deadline. It is a readiness check:
// a relay whose claims fail relays nothing, whatever a probe of the
// database says.
func (s *Subscriber) Ready(context.Context) error {
	limit := s.cfg.statementTimeout()
	return errors.Join(s.claimer.health.check("claims", limit), s.marks.check("settlement writes", limit))
}

// ClaimsFailing reports whether the last claims (or settlement writes)
// failed, failingAfter in a row or more: the database does not serve the
// relay, which a restart of the relay would not change.
func (s *Subscriber) ClaimsFailing() bool { return s.claimer.health.failing() || s.marks.failing() }
