package outbox

import (
	"context"
	"log/slog"
	"time"
)

// RunRetention deletes done rows older than retention, every interval
// (database clock), until ctx ends. Errors are logged and retried at the
// next interval; the relay does not depend on retention to be correct.
func RunRetention(ctx context.Context, store *Store, retention, interval time.Duration, logger *slog.Logger) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		n, err := store.PurgeDoneOlderThan(ctx, retention, PurgeBatchDefault)
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Log(ctx, failureLevel(err), "retention: delete done rows", slog.Any("error", err), slog.Duration("retention", retention))
		case n > 0:
			logger.Info("retention: deleted done rows", slog.Int("rows", n), slog.Duration("retention", retention))
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
