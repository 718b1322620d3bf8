package bridge

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/daemon"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/walsource"
)

// Backoff of the attempts to start the relay while a dependency cannot be
// reached: doubled from startRetryInitial up to startRetryMax, so that a
// relay comes back within seconds of its database or NATS server.
const (
	startRetryInitial = 250 * time.Millisecond
	startRetryMax     = 5 * time.Second
)

// IsConfigError reports whether err is bad configuration, which no retry
// fixes (exit status 2): a *config.Error, a database URL that cannot be
// parsed, an outbox entry that is refused, a stream the relay ensures
// that cannot deduplicate its republishes, or source: postgres-wal on a
// server whose wal_level is not logical.
func IsConfigError(err error) bool {
	var unsafe *dedup.UnsafeStreamError
	return config.IsError(err) || errors.Is(err, outbox.ErrUnknownScheme) || errors.Is(err, outbox.ErrInvalidEntry) ||
		errors.As(err, &unsafe) || errors.Is(err, walsource.ErrWALLevel)
}

// Serve is `bridge run`: it binds http.listen, builds the relay of the
// configured source and runs it until ctx ends. It returns nil after a
// clean stop (also when ctx ends before the relay could start), a
// configuration error (IsConfigError) when the configuration is bad, or
// the relay's error.
//
// It never gives up on a dependency: while the database or NATS cannot be
// reached (or the outbox table is not migrated yet) it retries with a
// capped backoff, logs each attempt, answers /healthz 200 and /readyz 503
// naming what it waits for — under Kubernetes an exit would be a
// CrashLoopBackOff, whose delay grows to five minutes, and the relay would
// come back minutes after its dependency. When the relay stops because its
// NATS connection was closed for good (daemon.ErrConnectionClosed), Serve
// builds it again with a new connection; /healthz answers 503 until that
// relay runs, so that an orchestrator restarts a process that does not
// heal.
func Serve(ctx context.Context, cfg *config.Config, logger *slog.Logger) error {
	hs, err := health.Listen(cfg.HTTP.Listen, logger)
	if err != nil {
		return err
	}
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	httpErr := make(chan error, 1)
	go func() { httpErr <- hs.Serve(httpCtx) }()
	go func() {
		<-ctx.Done()
		hs.SetDraining()
	}()
	err = serve(ctx, cfg, logger, hs)
	stopHTTP()
	if herr := <-httpErr; herr != nil && !errors.Is(herr, context.Canceled) {
		err = errors.Join(err, herr)
	}
	return err
}

// built, when set (by tests), is called with every relay serve builds.
var built func(Daemon)

func serve(ctx context.Context, cfg *config.Config, logger *slog.Logger, hs *health.Server) error {
	wait := startRetryInitial
	for attempt := 1; ; attempt++ {
		d, cleanup, err := NewDaemon(ctx, cfg, logger, hs)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				logger.Info("relay stopped before it started", slog.String("interrupted", err.Error()))
				return nil
			case IsConfigError(err), errors.Is(err, broker.ErrAddrInUse), errors.Is(err, broker.ErrStoreInUse):
				// Bad configuration, or this machine's setup (the embedded
				// server's port or store taken by another process): no wait
				// fixes them.
				return err
			}
			hs.Waiting(err)
			logger.Warn("relay cannot start yet; trying again", slog.Int("attempt", attempt),
				slog.Duration("retry_in", wait), slog.String("http", hs.Addr()), slog.Any("error", err))
			select {
			case <-ctx.Done():
				logger.Info("relay stopped before it started")
				return nil
			case <-time.After(wait):
			}
			wait = min(wait*2, startRetryMax)
			continue
		}
		if built != nil {
			built(d)
		}
		err = d.Run(ctx)
		cleanup()
		if ctx.Err() != nil || !errors.Is(err, daemon.ErrConnectionClosed) {
			return err
		}
		hs.Dead(err)
		attempt, wait = 0, startRetryInitial
	}
}
