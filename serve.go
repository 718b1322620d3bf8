package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/console"
	"github.com/outbox-bridge/bridge/internal/daemon"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source/mysqlbinlog"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
)

// Backoff of the attempts to start the relay while a dependency cannot be
// reached: doubled from startRetryInitial up to startRetryMax, so that a
// relay comes back within seconds of its database or NATS server.
const (
	startRetryInitial = 250 * time.Millisecond
	startRetryMax     = 5 * time.Second
)

// Heals: a relay whose NATS connection was closed for good is built again
// after healWait doubled per heal within healWindow (250 ms, 500 ms, 1 s,
// … up to healWaitMax), so that a cause that closes every new connection
// at once does not make a loop of connections; and healsUnhealthy heals
// within healWindow fail /healthz until fewer remain in the window, so
// that an orchestrator restarts a process that keeps failing.
const (
	healWait       = startRetryInitial
	healWaitMax    = 30 * time.Second
	healWindow     = 5 * time.Minute
	healsUnhealthy = 5
)

// IsConfigError reports whether err is bad configuration, which no retry
// fixes (exit status 2): config.ErrInvalid (a *config.Error, among them a
// stream spec of the configuration that cannot deduplicate the relay's
// republishes, or a constructor's "invalid config: <field>: <why>"), a
// database URL that cannot be parsed, an outbox entry that is refused, or
// source: postgres-wal on a server whose wal_level is not logical, or
// source: mysql-binlog on a server whose binary log does not fit
// (mysqlbinlog.ErrSettings: log_bin, binlog_format, binlog_row_image,
// replication privileges). An
// existing stream found unsafe is not one: its rows are held back (see
// dedup.Guard), so that a stream edited by an operator does not make every
// restart of the relay exit.
func IsConfigError(err error) bool {
	return errors.Is(err, config.ErrInvalid) || errors.Is(err, outbox.ErrUnknownScheme) || errors.Is(err, outbox.ErrInvalidEntry) ||
		errors.Is(err, postgreswal.ErrWALLevel) || errors.Is(err, mysqlbinlog.ErrSettings)
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
// heal, and also while it heals healsUnhealthy times within healWindow;
// each rebuild waits longer the more heals the window holds. Counters, the
// stall watch and the duplicate-window guard's findings carry over to the
// new relay.
func Serve(ctx context.Context, cfg *config.Config, logger *slog.Logger) error {
	hs, err := health.Listen(cfg.HTTP.Listen, logger)
	if err != nil {
		return err
	}
	if cfg.UI.Enabled {
		ui, err := newConsole(cfg, logger, hs)
		if err != nil {
			return err
		}
		defer ui.Close()
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

// newConsole serves the console at /ui/ of hs (ui.enabled). It opens the
// outbox table with its own sessions at its first request, so that it
// answers while the relay waits for its database.
func newConsole(cfg *config.Config, logger *slog.Logger, hs *health.Server) (*console.Console, error) {
	logger = logger.With(slog.String("component", "console"))
	ui, err := console.New(console.Config{
		Token:                cfg.UI.Token,
		ReadOnlyWithoutToken: cfg.UI.ReadOnlyWithoutToken,
		Table:                cfg.Database.Table,
		InflightTimeout:      cfg.Relay.InflightTimeout,
	}, func(ctx context.Context) (*outbox.Store, func(), error) {
		return NewStore(ctx, cfg, logger)
	}, hs.Ready, logger)
	if err != nil {
		return nil, err
	}
	hs.Handle("/ui/", ui)
	logger.Info("console at /ui/", slog.String("http", hs.Addr()), slog.Bool("actions", cfg.UI.Token != ""),
		slog.Bool("read_only_without_token", cfg.UI.ReadOnlyWithoutToken))
	return ui, nil
}

// built, when set (by tests), is called with every relay serve builds.
var built func(Daemon)

// inheritor is a relay that takes over what an earlier relay of the
// process observed (counters, stall, guard findings).
type inheritor interface {
	Inherit(prev Daemon)
}

func serve(ctx context.Context, cfg *config.Config, logger *slog.Logger, hs *health.Server) error {
	wait := startRetryInitial
	var prev Daemon
	var heals []time.Time
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
			attrs := []any{slog.Int("attempt", attempt), slog.Duration("retry_in", wait), slog.String("http", hs.Addr()), slog.Any("error", err)}
			if outbox.IsCredentialsRefused(err) || errors.Is(err, nats.ErrAuthorization) {
				attrs = append(attrs, slog.String("hint", "the server refused the user or password: tried again in case they are being rotated (a Kubernetes secret); if they are wrong, fix database.url or nats.url (or the files they are read from)"))
			}
			logger.Warn("relay cannot start yet; trying again", attrs...)
			if !sleep(ctx, wait) {
				logger.Info("relay stopped before it started")
				return nil
			}
			wait = min(wait*2, startRetryMax)
			continue
		}
		if h, ok := d.(inheritor); ok && prev != nil {
			h.Inherit(prev)
		}
		prev = d
		if built != nil {
			built(d)
		}
		err = d.Run(ctx)
		if ctx.Err() == nil && errors.Is(err, daemon.ErrConnectionClosed) {
			// Before cleanup: the probes of the relay that stopped read
			// its closed database and connection.
			hs.Dead(err)
		}
		cleanup()
		if ctx.Err() != nil || !errors.Is(err, daemon.ErrConnectionClosed) {
			return err
		}
		now := time.Now()
		heals = append(slices.DeleteFunc(heals, func(t time.Time) bool { return now.Sub(t) >= healWindow }), now)
		if len(heals) >= healsUnhealthy {
			hs.UnhealthyUntil(fmt.Errorf("the NATS connection was closed for good %d times within %s (last: %w); the relay keeps healing, but something closes its connections",
				len(heals), healWindow, err), heals[len(heals)-healsUnhealthy].Add(healWindow))
		}
		pause := min(healWait<<min(len(heals)-1, 16), healWaitMax)
		logger.Warn("building the relay again with a new NATS connection", slog.Int("heals_within_window", len(heals)),
			slog.Duration("window", healWindow), slog.Duration("in", pause))
		if !sleep(ctx, pause) {
			return nil
		}
		attempt, wait = 0, startRetryInitial
	}
}

// sleep waits d, or until ctx ends: then it returns false.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
