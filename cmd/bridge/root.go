package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/buildinfo"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "bridge",
		Short: "Relay a transactional outbox table to NATS JetStream",
		Long: `bridge claims committed rows of a transactional outbox table, publishes each to
NATS JetStream with a Nats-Msg-Id derived from the row's idempotency key, and marks
the row relayed only after the PubAck (source: table; postgres-wal and mysql-binlog
read the same rows from the database's log instead). With no configuration it runs the embedded
default: a SQLite outbox in ./bridge-data/outbox.db and an in-process NATS server
with JetStream on 127.0.0.1:4222 (stream EVENTS on events.>).

Configuration: a YAML file (--config), overridden by BRIDGE_* environment variables
(BRIDGE_ + the YAML path in upper snake case, e.g. BRIDGE_DATABASE_URL), overridden
by flags.

Exit codes: 0 clean stop, 1 runtime failure, 2 bad usage or configuration;
bridge replay also 3 (rows it could not send again, see bridge replay --help).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Flags every command reads; run and config add the relay's own.
	config.RegisterCommonFlags(root.PersistentFlags())
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// The error and where to look, not 30 lines of flags above it.
		return usageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	root.AddCommand(
		newRunCommand(),
		newMigrateCommand(),
		newEnqueueCommand(),
		newStatusCommand(),
		newTailCommand(),
		newRequeueCommand(),
		newRetryCommand(),
		newPurgeCommand(),
		newReplayCommand(),
		newSlotCommand(),
		newConfigCommand(),
		newVersionCommand(),
	)
	for _, c := range root.Commands() {
		c.Args = exactArgs(c)
	}
	return root
}

// exactArgs refuses positional arguments: every command takes flags only.
// Like a flag error, the refusal is one line pointing at --help.
func exactArgs(c *cobra.Command) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usage("%s takes no arguments, got %q (see %s --help)", cmd.CommandPath(), strings.Join(args, " "), cmd.CommandPath())
		}
		return nil
	}
}

// isCobraUsage recognises cobra's own usage errors, which it returns as
// plain errors ("unknown command …", "unknown flag …"): cobra offers no
// typed error for them.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, prefix := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "invalid argument", "flag needs an argument", "if any flags in the group"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// loadConfig reads the configuration of cmd's flags and the environment.
// Every error is bad configuration (exit 2).
func loadConfig(cmd *cobra.Command) (*config.Config, error) {
	cfg, err := config.Load(cmd.Flags(), os.Environ())
	if err != nil {
		return nil, usageError{err}
	}
	if err := checkOneTable(cmd, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// newLogger builds the one logger: JSON unless log.format is text, or
// auto on a terminal. Commands other than run log at warn unless
// --log-level or log.level says otherwise, so their output stays theirs.
func newLogger(cfg *config.Config, w io.Writer, daemon bool) *slog.Logger {
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	if !daemon && cfg.Log.Level == config.LogLevelDefault {
		level = slog.LevelWarn
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration { // "30s", not 30000000000
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}
	text := cfg.Log.Format == config.LogFormatText
	if cfg.Log.Format == config.LogFormatAuto {
		f, ok := w.(*os.File)
		text = ok && term.IsTerminal(int(f.Fd()))
	}
	if text {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// classify turns errors the user can fix by changing the input into usage
// errors (exit 2): bad configuration, and a database URL that names no
// database of its server (run waits for that one instead: a database may be
// created after its relay is deployed).
func classify(err error) error {
	if err == nil {
		return nil
	}
	if bridge.IsConfigError(err) || errors.Is(err, outbox.ErrUnknownDatabase) {
		return usageError{err}
	}
	return err
}

// setup loads the configuration and the logger of a command.
func setup(cmd *cobra.Command, daemon bool) (context.Context, *config.Config, *slog.Logger, error) {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	logger := newLogger(cfg, cmd.ErrOrStderr(), daemon)
	outbox.LogMySQLDriver(logger)
	if daemon {
		bi := buildinfo.Read()
		logger.Info("bridge starting", slog.String("version", bi.Version), slog.String("commit", bi.Commit),
			slog.Bool("modified", bi.Modified), slog.String("commit_time", bi.Date), slog.String("go", bi.GoVersion))
	}
	for _, name := range config.UnknownEnv(os.Environ()) {
		level := slog.LevelWarn
		if kubernetesServiceLink(name) {
			level = slog.LevelDebug
		}
		if hint := config.EnvHint(name); hint != "" {
			logger.Log(cmd.Context(), level, "ignoring BRIDGE_ variable", slog.String("variable", name), slog.String("reason", hint))
			continue
		}
		logger.Log(cmd.Context(), level, "ignoring unknown BRIDGE_ variable (misspelled?)", slog.String("variable", name))
	}
	return cmd.Context(), cfg, logger, nil
}

// withStore runs fn with each configured outbox table (resolveTables),
// as status and the maintenance commands (retry, requeue, purge) use it;
// many says whether there are several (or a pattern named them), for the
// output to name the table. Unlike run, migrate and enqueue it does not
// create a SQLite database that is not there: a mistyped --data-dir would
// otherwise show an empty outbox.
func withStore(cmd *cobra.Command, fn func(ctx context.Context, store *outbox.Store, many bool) error) error {
	ctx, cfg, logger, err := setup(cmd, false)
	if err != nil {
		return err
	}
	if err := checkSQLiteOutbox(cfg, func(path string) error {
		return usage("no outbox database at %s: check --data-dir or --database-url, or create it with bridge migrate (bridge run and bridge enqueue create the --data-dir default too)", path)
	}); err != nil {
		return err
	}
	db, cleanup, err := bridge.NewExistingDB(ctx, cfg)
	if err != nil {
		return classify(err)
	}
	defer cleanup()
	tables, err := resolveTables(ctx, db, cfg, logger)
	if err != nil {
		return err
	}
	many := len(cfg.Database.Tables) > 0
	each := func(table string) error {
		store, err := bridge.OpenTableStore(ctx, db, cfg, table, logger)
		if err != nil {
			return classify(err)
		}
		return fn(ctx, store, many)
	}
	if !many {
		return each(tables[0])
	}
	return forEachTable(cmd, tables, each)
}

// forEachTable runs do for each table, going on past a table that fails
// (dropped meanwhile, not a bridge table after all): each failure is told
// on stderr naming its table, and the error returned, when any failed,
// counts them (exit 1).
func forEachTable(cmd *cobra.Command, tables []string, do func(table string) error) error {
	failed := 0
	for _, table := range tables {
		if err := do(table); err != nil {
			if cmd.Context().Err() != nil {
				return err // interrupted: the tables after it are not tried
			}
			failed++
			fmt.Fprintf(cmd.ErrOrStderr(), "bridge: %s: %v\n", table, err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %s failed (above); the others are done", failed, outbox.Count(len(tables), "table"))
	}
	return nil
}

// checkSQLiteOutbox refuses a SQLite outbox (exit 2) that no service
// could write while the relay reads it: an in-memory database, which lives
// and dies with one connection of one process. With a file path that does
// not exist it returns missing(path): opening it would create an empty
// file. Other databases pass.
func checkSQLiteOutbox(cfg *config.Config, missing func(path string) error) error {
	path := cfg.SQLitePath()
	if path == "" {
		return nil
	}
	// modernc.org/sqlite, like SQLite, keeps ":memory:" and a
	// "mode=memory" URI in memory.
	if strings.HasPrefix(path, ":memory:") || strings.Contains(path, "mode=memory") {
		return usage("database.url %s is an in-memory SQLite database, which only the process that opens it sees: it cannot hold an outbox that a service writes and the relay reads; name a file, such as sqlite:./outbox.db", cfg.RedactedDatabaseURL())
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return missing(path)
	}
	return nil
}

// requireNamedEmbeddedTable refuses, for enqueue, a table other than the
// default on the embedded database that is not there yet (exit 2):
// enqueue would create it, and a mistyped --table would leave rows in a
// table no relay reads. bridge run --table or bridge migrate creates it.
func requireNamedEmbeddedTable(ctx context.Context, cfg *config.Config, logger *slog.Logger) error {
	if !cfg.EmbeddedDatabase() || cfg.Database.Table == config.TableDefault {
		return nil
	}
	hint := fmt.Sprintf("no outbox table %s in the embedded database %s: bridge enqueue creates only the default table %s there; create %s with bridge migrate --table %s (or bridge run --table %s), or check --table",
		cfg.Database.Table, cfg.RedactedDatabaseURL(), config.TableDefault, cfg.Database.Table, cfg.Database.Table, cfg.Database.Table)
	if err := checkSQLiteOutbox(cfg, func(string) error { return usage("%s", hint) }); err != nil {
		return err
	}
	db, cleanup, err := bridge.NewExistingDB(ctx, cfg)
	if err != nil {
		return classify(err)
	}
	defer cleanup()
	if _, err := bridge.OpenTableStore(ctx, db, cfg, cfg.Database.Table, logger); errors.Is(err, outbox.ErrNoTable) {
		return usage("%s", hint)
	}
	return nil
}

// requireExplicitSQLiteOutbox is checkSQLiteOutbox for run and enqueue:
// they create and migrate the --data-dir default themselves, but a SQLite
// file named by database.url must exist (bridge migrate creates it), or a
// mistyped path would leave an empty file behind.
func requireExplicitSQLiteOutbox(cfg *config.Config) error {
	return checkSQLiteOutbox(cfg, func(path string) error {
		if cfg.EmbeddedDatabase() {
			return nil
		}
		return usage("no outbox database at %s: check database.url (--database-url); bridge migrate --database-url %s creates it (run and enqueue create only the --data-dir default)", path, cfg.Database.URL)
	})
}

// kubernetesServiceLink reports the variables Kubernetes injects for a
// Service named bridge (BRIDGE_SERVICE_HOST, BRIDGE_PORT_8080_TCP, …), and
// the test suite's BRIDGE_TEST_*; they are not misspelled settings.
func kubernetesServiceLink(name string) bool {
	for _, prefix := range []string{"BRIDGE_SERVICE_", "BRIDGE_PORT", "BRIDGE_TEST_"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}
