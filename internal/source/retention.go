package source

import (
	"context"
	"log/slog"
	"time"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// retentionInterval is how often retention runs for done rows kept
// keep: a tenth of it, between 1 s and 1 min.
func retentionInterval(keep time.Duration) time.Duration {
	return min(max(keep/10, time.Second), time.Minute)
}

// Retention deletes the done rows older than keep (relay.retention,
// database clock), now and then every retentionInterval, in batches of
// outbox.PurgeBatchDefault: a Service of the table source (when
// relay.retention is set); RunRetention runs it for the postgres-wal
// source. Errors are logged and retried at the next interval; the relay
// does not depend on retention to be correct.
type Retention struct {
	StartStop
	// Purged, when a test set it, receives the rows each run deleted (0
	// for a run that deleted none or failed). Set it before Start.
	Purged *TestSignal[int]
	store  *outbox.Store
	keep   time.Duration
	logger *slog.Logger
}

// NewRetention returns the retention of store's done rows older than keep.
func NewRetention(store *outbox.Store, keep time.Duration, logger *slog.Logger) *Retention {
	return &Retention{store: store, keep: keep, logger: logger}
}

// Start runs retention until Stop or until ctx ends.
func (r *Retention) Start(ctx context.Context) { r.StartLoop(ctx, r.run) }

func (r *Retention) run(ctx context.Context) {
	ticker := time.NewTicker(retentionInterval(r.keep))
	defer ticker.Stop()
	for {
		n, err := r.store.PurgeDoneOlderThan(ctx, r.keep, outbox.PurgeBatchDefault)
		switch {
		case err != nil && ctx.Err() == nil:
			r.logger.Log(ctx, outbox.FailureLevel(err), "retention: delete done rows", slog.Any("error", err), slog.Duration("retention", r.keep))
		case n > 0:
			r.logger.Info("retention: deleted done rows", slog.Int("rows", n), slog.Duration("retention", r.keep))
		}
		r.Purged.Signal(n)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// RunRetention deletes the done rows of store older than keep (database
// clock), now and then every tenth of keep (between 1 s and 1 min), until
// ctx ends: Retention, for a source that does not run it as a Service
// (postgres-wal). Errors are logged and retried at the next interval.
func RunRetention(ctx context.Context, store *outbox.Store, keep time.Duration, logger *slog.Logger) {
	NewRetention(store, keep, logger).run(ctx)
}

// LogSourceServices are the services of a log source (postgres-wal,
// mysql-binlog): its stall watch and, unless relay.delete_on_relay is set,
// retention of store's done rows (RunRetention).
func LogSourceServices(stall func(context.Context), relay config.Relay, store *outbox.Store, logger *slog.Logger) []func(context.Context) {
	services := []func(context.Context){stall}
	if !relay.DeleteOnRelay {
		services = append(services, func(ctx context.Context) { RunRetention(ctx, store, relay.Retention, logger) })
	}
	return services
}
