package table

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

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
func (s *Subscriber) statement(ctx context.Context, h *source.LoopHealth, fn func(ctx context.Context) error) error {
	return runStatement(ctx, s.store.DB(), s.cfg.statementTimeout(), h, fn)
}

// runStatement is Subscriber.statement for any of the table source's
// services: fn runs on db within limit, its outcome recorded in h.
func runStatement(ctx context.Context, db *outbox.DB, limit time.Duration, h *source.LoopHealth, fn func(ctx context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	h.Begin()
	err := fn(sctx)
	if err != nil && sctx.Err() != nil && ctx.Err() == nil {
		db.Abandon()
		err = fmt.Errorf("%w (%s, a third of relay.inflight_timeout, at least 5s; the sessions opened until now are replaced): %w", ErrStatementTimeout, limit, err)
	}
	if ctx.Err() == nil {
		h.End(err)
	}
	return err
}

// Ready reports whether the relay's claims and settlement writes work:
// an error when source.FailingAfter of them in a row failed (naming the last
// error) or when one has run past its deadline. It is a readiness check:
// a relay whose claims fail relays nothing, whatever a probe of the
// database says.
func (s *Subscriber) Ready(context.Context) error {
	limit := s.cfg.statementTimeout()
	after := limit + time.Second // the statement's deadline did not end it
	return errors.Join(s.claimer.health.Check("claims", after), s.marks.Check("settlement writes", after))
}

// ClaimsFailing reports whether the last claims (or settlement writes)
// failed, source.FailingAfter in a row or more: the database does not serve the
// relay, which a restart of the relay would not change.
func (s *Subscriber) ClaimsFailing() bool { return s.claimer.health.Failing() || s.marks.Failing() }
