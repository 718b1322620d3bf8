package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// DefaultTimeout is the timeout of WithTimeout when the option is not
// given.
const DefaultTimeout = 5 * time.Second

// ErrInvalidConfig is wrapped by the error of New (and the panic of Dedup)
// for an invalid option value, and by CreateBucket for an invalid TTL.
var ErrInvalidConfig = errors.New("invalid config")

// Option configures a Deduplicator.
type Option func(*config)

type config struct {
	base         context.Context
	timeout      time.Duration
	lease        time.Duration // 0: no lease
	leaseSet     bool
	nakDelay     time.Duration
	requireMsgID bool
	logger       *slog.Logger
}

// WithProcessingLease turns on the processing lease: an entry stays in state
// "processing" while its handler runs and is set to "done" before the ack;
// a redelivery that finds a "processing" entry younger than d is negatively
// acknowledged with a delay of the lease's remaining time, and one that finds
// it older takes it over (kv.Update with the entry's revision) and runs the
// handler. The handler's context ends d after the claim. d must be greater
// than 0, longer than the longest handler run and shorter than the bucket's
// TTL. Without this option an existing entry always means "skip". Defaults
// to no lease.
func WithProcessingLease(d time.Duration) Option {
	return func(c *config) { c.lease, c.leaseSet = d, true }
}

// WithNakDelay makes the negative acknowledgements sent after a handler
// failure or a KV failure ask for redelivery after d (msg.NakWithDelay)
// instead of at once (msg.Nak). d must not be negative. Defaults to 0.
func WithNakDelay(d time.Duration) Option {
	return func(c *config) { c.nakDelay = d }
}

// WithTimeout bounds each I/O step made for one message: the claim (Create,
// and with a lease Get and Update; a deadline of the base context that comes
// earlier wins), the delete after a failure, the "done" mark and the double
// ack. d must be greater than 0. Defaults to DefaultTimeout (5s).
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// WithBaseContext sets the context that handlers' contexts and the claim's
// KV calls derive from. Cancel it to stop claiming: a message delivered
// after that is negatively acknowledged without running its handler. Acks,
// "done" marks and entry deletions after a handler returned still run, bounded
// by the timeout, so a shutdown does not leave settled work unacknowledged.
// ctx must not be nil. Defaults to context.Background().
func WithBaseContext(ctx context.Context) Option {
	return func(c *config) { c.base = ctx }
}

// RequireMsgID refuses messages without a Nats-Msg-Id header: they are
// terminated (msg.TermWithReason) without running the handler, since a
// redelivery could not be recognized. Without this option they are passed
// to the handler, acked on success and negatively acknowledged on failure,
// with no dedup. Defaults to pass-through.
func RequireMsgID() Option {
	return func(c *config) { c.requireMsgID = true }
}

// WithLogger sets the logger for what the wrapper cannot return: KV and ack
// failures (Warn/Error), handler failures and panics (Warn/Error), lease
// takeovers (Info), skipped duplicates (Debug). l must not be nil. Defaults
// to slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

func newConfig(opts []Option) (config, error) {
	c := config{base: context.Background(), timeout: DefaultTimeout, logger: slog.Default()}
	for _, opt := range opts {
		opt(&c)
	}
	switch {
	case c.base == nil:
		return config{}, fmt.Errorf("%w: base context: nil: want a context", ErrInvalidConfig)
	case c.timeout <= 0:
		return config{}, fmt.Errorf("%w: timeout %v: must be greater than 0", ErrInvalidConfig, c.timeout)
	case c.leaseSet && c.lease <= 0:
		return config{}, fmt.Errorf("%w: processing lease %v: must be greater than 0", ErrInvalidConfig, c.lease)
	case c.nakDelay < 0:
		return config{}, fmt.Errorf("%w: nak delay %v: must be 0 or more", ErrInvalidConfig, c.nakDelay)
	case c.logger == nil:
		return config{}, fmt.Errorf("%w: logger: nil: want a *slog.Logger", ErrInvalidConfig)
	}
	return c, nil
}
