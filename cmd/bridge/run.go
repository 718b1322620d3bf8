package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/daemon"
)

func newRunCommand() *cobra.Command {
	var checkOnly bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the relay daemon",
		Long: `Run the relay: claim committed outbox rows, publish each to JetStream, mark them
relayed after the PubAck. SIGTERM or SIGINT drains (publishes in progress finish,
marks are flushed) and exits 0; a second signal exits 1 at once.

With source: postgres-wal it reads the table's inserts from PostgreSQL's write-ahead
log (the replication slot wal.slot, created by bridge migrate) and publishes them in
commit order, instead of claiming rows. With source: mysql-binlog it reads them
from the binary log of MariaDB or MySQL, as a replica does (binlog.server_id), from
the position stored in <table>_binlog; one relay reads a table's log at a time, the
others wait as standbys (docs/MYSQL-BINLOG.md).

While the database or NATS cannot be reached (or the table is not migrated yet, or
the replication slot is missing) it waits, trying again every 250ms to 5s and
logging each attempt: /healthz answers 200 and /readyz 503 naming what it waits for.
It exits for bad configuration (2), such as wal_level not logical with
source: postgres-wal, or log_bin off, binlog_format not ROW, binlog_row_image or
binlog_row_metadata not FULL, or no REPLICATION SLAVE / CLIENT grant with source:
mysql-binlog, and when a port or store it must own is taken (1):
http.listen, the embedded server's --nats-listen or its JetStream store (another
relay on the same --data-dir).

With several tables or patterns (--table repeated, database.tables) one relay
relays them all over one database pool and one NATS connection, sharing
relay.max_in_flight between the tables that have work, and resolving the patterns
again every database.tables_refresh: a new tenant's table is picked up, a dropped
one let go. With source: postgres-wal they share one replication slot and one
publication (bridge migrate adds each table to it), read by one replication
connection. Metrics carry the label table. Tenants whose idempotency keys may
repeat across tables set dedup.namespace '{schema}', so that each table's
Nats-Msg-Ids are its own.

With no configuration it runs the embedded default: SQLite outbox
<data-dir>/outbox.db (migrated at start), an in-process NATS server with JetStream
on --nats-listen storing in <data-dir>/jetstream, and stream EVENTS on events.>.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// --check-config starts nothing: no "bridge starting" line.
			ctx, cfg, logger, err := setup(cmd, !checkOnly)
			if err != nil {
				return err
			}
			if err := cfg.CheckFiles(); err != nil {
				return usageError{err}
			}
			if err := requireExplicitSQLiteOutbox(cfg); err != nil {
				return err
			}
			if len(cfg.Database.Tables) > 0 && cfg.Source == config.SourceWatermillForwarder {
				return usage("--table %s: source: %s relays one Watermill topic; several outbox tables or a pattern are relayed by source: table or postgres-wal",
					strings.Join(cfg.Database.Tables, " --table "), cfg.Source)
			}
			if checkOnly {
				fmt.Fprintln(cmd.OutOrStdout(), "configuration is valid")
				return nil
			}
			daemon.SetMemoryLimit(logger)
			gcCtx, stopGC := context.WithCancel(ctx)
			defer stopGC()
			go daemon.TuneGC(gcCtx, daemon.GCHeadroomDefault, logger)
			// bridge.Serve waits for a database or NATS that cannot be
			// reached, and a SIGTERM or SIGINT meanwhile is a clean stop
			// (exit 0); only bad configuration stops it (exit 2).
			return classify(bridge.Serve(ctx, cfg, logger))
		},
	}
	cmd.Flags().BoolVar(&checkOnly, "check-config", false, "validate the configuration and exit (0 valid, 2 invalid)")
	config.RegisterRelayFlags(cmd.Flags())
	return acceptsManyTables(cmd)
}
