package outbox

import (
	"context"
	"log/slog"
	"time"
)

// retentionInterval is how often retention runs for done rows kept
// keep: a tenth of it, between 1 s and 1 min.
func retentionInterval(keep time.Duration) time.Duration {
	return min(max(keep/10, time.Second), time.Minute)
}

// retention deletes the done rows older than keep (relay.retention,
// database clock), now and then every retentionInterval, in batches of
// PurgeBatchDefault. It is a service of the Subscriber (when
// SubscriberConfig.Retention is set); RunRetention runs it for the other
// sources of the table. Errors are logged and retried at the next
// interval; the relay does not depend on retention to be correct.
type retention struct {
	startStop
	store  *Store
	keep   time.Duration
	logger *slog.Logger
}

func newRetention(store *Store, keep time.Duration, logger *slog.Logger) *retention {
	return &retention{store: store, keep: keep, logger: logger}
}

// Start runs retention until Stop or until ctx ends.
func (r *retention) Start(ctx context.Context) { r.start(ctx, r.run) }

func (r *retention) run(ctx context.Context) {
	ticker := time.NewTicker(retentionInterval(r.keep))
	defer ticker.Stop()
	for {
		n, err := r.store.PurgeDoneOlderThan(ctx, r.keep, PurgeBatchDefault)
		switch {
		case err != nil && ctx.Err() == nil:
			r.logger.Log(ctx, failureLevel(err), "retention: delete done rows", slog.Any("error", err), slog.Duration("retention", r.keep))
		case n > 0:
			r.logger.Info("retention: deleted done rows", slog.Int("rows", n), slog.Duration("retention", r.keep))
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// RunRetention deletes the done rows of store older than keep (database
// clock), now and then every tenth of keep (between 1 s and 1 min), until
// ctx ends: the retention service of a Subscriber, for a source that has
// none (postgres-wal). Errors are logged and retried at the next interval.
func RunRetention(ctx context.Context, store *Store, keep time.Duration, logger *slog.Logger) {
	newRetention(store, keep, logger).run(ctx)
}
