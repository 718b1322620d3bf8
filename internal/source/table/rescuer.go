package table

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// Bounds of the rescuer's interval (RescueIntervalFor).
const (
	rescueIntervalMin = 100 * time.Millisecond
	rescueIntervalMax = 5 * time.Second
)

// RescueIntervalFor is how often in-flight recovery runs for leases of
// inflightTimeout, unless SubscriberConfig.RescueInterval says otherwise:
// a tenth of the lease, between 100 ms and 5 s (3 s for the default
// relay.inflight_timeout of 30 s). A lease that ended is requeued within
// about inflightTimeout plus this interval after its claim, at the cost of
// one requeue statement (three on MySQL) per relay and interval.
func RescueIntervalFor(inflightTimeout time.Duration) time.Duration {
	return min(max(inflightTimeout/10, rescueIntervalMin), rescueIntervalMax)
}

// rescuer is the table source's in-flight recovery, a service of the
// Subscriber: once when it starts and then every interval, it requeues the
// rows in_flight whose lease (InflightTimeout, database clock) has ended —
// rows of a relay that crashed, froze or lost its database — so that the
// next claim, of any relay, takes them again (outbox.Store.RequeueInflightOlderThan).
// It runs whether or not its relay claims (a full in-flight window, NATS
// down): the rows it moves may be claimed by another relay.
//
// A failed requeue is logged and tried again after the interval, and
// after twice as long for each further failure in a row (rescueRetry); it
// does not count against readiness, which follows the claims and settlement
// writes.
type rescuer struct {
	source.StartStop
	store    *outbox.Store
	timeout  time.Duration // the lease: InflightTimeout
	interval time.Duration
	limit    time.Duration // the statement deadline: SubscriberConfig.statementTimeout
	logger   *slog.Logger
	requeued *atomic.Int64 // Counters.Requeued
	health   source.LoopHealth
	signals  *Signals // the Subscriber's: Rescued
}

func newRescuer(store *outbox.Store, cfg *SubscriberConfig, requeued *atomic.Int64, signals *Signals, logger *slog.Logger) *rescuer {
	return &rescuer{
		store: store, timeout: cfg.InflightTimeout, interval: cfg.RescueInterval, limit: cfg.statementTimeout(),
		logger: logger, requeued: requeued, signals: signals,
	}
}

// Start runs in-flight recovery now and then every interval until Stop or
// until ctx ends.
func (r *rescuer) Start(ctx context.Context) { r.StartLoop(ctx, r.run) }

func (r *rescuer) run(ctx context.Context) {
	var failures int
	for {
		wait := r.interval
		if r.rescue(ctx, &failures) {
			failures = 0
		} else {
			wait = rescueRetry(r.interval, failures)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// rescueRetryMax bounds the wait after failed in-flight recoveries.
const rescueRetryMax = time.Minute

// rescueRetry is the wait after failures failed recoveries in a row: the
// interval, doubled per failure after the first, up to rescueRetryMax; a
// table the relay may not write (a privilege revoked) otherwise logged a
// warning every interval for as long as it lasted (found by a saboteur).
func rescueRetry(interval time.Duration, failures int) time.Duration {
	return min(interval<<min(max(failures-1, 0), 10), max(rescueRetryMax, interval))
}

// rescue requeues the rows whose lease ended. A driver may move a bounded
// number of rows per call (MySQL: mysqlBatchMax), so it calls again at once
// while a call moved rows.
func (r *rescuer) rescue(ctx context.Context, failures *int) (ok bool) {
	var total int
	ok = true
	for ctx.Err() == nil {
		var n int
		err := runStatement(ctx, r.store.DB(), r.limit, &r.health, func(ctx context.Context) (err error) {
			n, err = r.store.RequeueInflightOlderThan(ctx, r.timeout)
			return err
		})
		if err != nil {
			ok = false
			if ctx.Err() == nil {
				*failures++
				r.logger.Warn("in-flight recovery failed; trying again later", slog.Any("error", err), slog.Duration("retry_in", rescueRetry(r.interval, *failures)))
			}
			break
		}
		if n == 0 {
			break
		}
		total += n
		r.requeued.Add(int64(n))
	}
	if total > 0 {
		r.logger.Warn("requeued in-flight rows past their lease", slog.Int("rows", total), slog.Duration("inflight_timeout", r.timeout))
	}
	r.signals.Rescued.Signal(total)
	return ok
}
