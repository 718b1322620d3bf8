package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source/mysqlbinlog"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder"
)

func newMigrateCommand() *cobra.Command {
	var (
		print bool
		after int64
	)
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox table (--print: show the SQL instead)",
		Long: `Create or upgrade the outbox table (--table) in the configured database
(--database-url) with its indexes. The database itself must exist (exit 2 with the
CREATE DATABASE to run otherwise; a SQLite file is created). No trigger is added: the relay finds new rows by
polling (or in the log, with source: postgres-wal or mysql-binlog), and the
producers' commits wait for nothing of it. Migrations are versioned
and embedded; applied versions are recorded in the table <table>_migrations. Safe
to run again.

--print writes the SQL instead of running it, for a DBA who applies schema changes
by hand: every migration for the kind of database --database-url names (postgres://,
mysql:// or sqlite:), each followed by the row that records it in <table>_migrations,
so that bridge migrate and bridge run later find the table up to date. The database
is not opened: any URL of the right kind will do, such as postgres://db/app.
--after N leaves out the migrations up to version N (SELECT max(version_id) FROM
<table>_migrations says which version a table has). Apply it with the database's
client: bridge migrate --print | psql "$DATABASE_URL".

With source: postgres-wal it then creates, when missing, the publication of the
table's inserts (wal.publication) and the logical replication slot (wal.slot,
plugin pgoutput) the relay reads; the server's wal_level must be logical (exit 2
otherwise). The slot keeps WAL until the relay confirms it: see bridge slot drop.
--print leaves them out; by hand they are CREATE PUBLICATION <wal.publication> FOR
TABLE <table> WITH (publish = 'insert'), then SELECT
pg_create_logical_replication_slot('<wal.slot>', 'pgoutput').

With source: mysql-binlog it first checks the server's binary log (log_bin on,
binlog_format ROW, binlog_row_image FULL, the REPLICATION SLAVE and CLIENT grants;
exit 2 naming each that does not fit), then creates <table>_binlog, the relay's
position, and stores the server's current position in it, so that rows committed
from then on are read from the binary log in commit order. --print adds its
CREATE TABLE; applied by hand, bridge run stores the position on its first start.

Several tables (--table repeated) or a pattern: with * in the schema part only
('tenant_*.outbox'), the table is created or upgraded in every schema (MySQL:
database) the pattern matches; with * in the table part ('app.*_outbox'), the
bridge tables it matches are upgraded; --print takes one table. With source:
postgres-wal each table is added to the one publication wal.publication (one slot
for them all), so that a relay over the same --table reads them all.

With source: watermill-forwarder it creates the offsets table
watermill_offsets_<watermill.forwarder_topic> instead (watermill-sql's own DDL).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cfg, logger, err := setup(cmd, false)
			if err != nil {
				return err
			}
			if !print && after != 0 {
				return usage("--after goes with --print")
			}
			if print {
				if len(cfg.Database.Tables) > 0 {
					return usage("--print writes the migrations of one table without opening the database; give one --table (the SQL is the same for every table but its name)")
				}
				return printMigrations(cmd, cfg, after)
			}
			if len(cfg.Database.Tables) > 0 && cfg.Source == config.SourceWatermillForwarder {
				return usage("--table %s: several tables or a pattern are migrated for source: table or postgres-wal; with source: %s give one table",
					strings.Join(cfg.Database.Tables, " --table "), cfg.Source)
			}
			if cfg.Source == config.SourceWatermillForwarder {
				return migrateWatermill(ctx, cmd, cfg, logger)
			}
			// Opened directly: bridge.NewDB migrates the embedded database
			// by itself, and this command should report what it applied.
			db, err := outbox.OpenSession(ctx, cfg.DatabaseURL(), cfg.DatabaseSession())
			if err != nil {
				return classify(err)
			}
			defer db.Close()
			if cfg.Source == config.SourcePostgresWAL {
				// Refused before the table is touched: without logical
				// decoding the source cannot run at all.
				if err := postgreswal.CheckWALLevel(ctx, db.SQL); err != nil {
					return classify(err)
				}
			}
			if cfg.Source == config.SourceMySQLBinlog {
				// Refused before the table is touched: without a row-based
				// binary log the source cannot run at all.
				if _, err := mysqlbinlog.CheckServer(ctx, db.SQL); err != nil {
					return classify(err)
				}
			}
			tables, err := migrationTargets(ctx, db, cfg, logger)
			if err != nil {
				return err
			}
			migrate := func(table string) error {
				applied, err := outbox.Migrate(ctx, db, table)
				if err != nil {
					return err
				}
				if len(applied) == 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "outbox table %s in %s is up to date\n", table, db.Redacted)
				}
				for _, m := range applied {
					fmt.Fprintf(cmd.OutOrStdout(), "applied migration %05d to %s in %s\n", m.Version, table, db.Redacted)
				}
				return nil
			}
			if len(cfg.Database.Tables) == 0 {
				err = migrate(tables[0])
			} else {
				err = forEachTable(cmd, tables, migrate)
			}
			if err != nil {
				return err
			}
			if cfg.Source == config.SourcePostgresWAL {
				return migrateWAL(ctx, cmd, cfg, db, tables)
			}
			if cfg.Source == config.SourceMySQLBinlog {
				created, err := mysqlbinlog.Setup(ctx, db, tables[0])
				if err != nil {
					return classify(err)
				}
				if created {
					fmt.Fprintf(cmd.OutOrStdout(), "binary log position table %s_binlog in %s: reading starts at the server's current position\n", tables[0], db.Redacted)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "binary log position table %s_binlog in %s is ready (its position kept)\n", tables[0], db.Redacted)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&print, "print", false, "print the SQL of the migrations instead of applying them")
	cmd.Flags().Int64Var(&after, "after", 0, "with --print: only the migrations after this version")
	return acceptsManyTables(cmd)
}

// migrationTargets are the tables bridge migrate creates or upgrades: each
// name configured; for a pattern with * in the schema part only
// ('tenant_*.outbox'), that table in every schema the pattern matches,
// created where missing; for a pattern with * in the table part, the
// bridge tables it matches (outbox.DB.MatchTables), upgraded. A pattern
// matching nothing is logged as a warning.
func migrationTargets(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) ([]string, error) {
	out := outbox.NewTableList(db)
	for _, name := range cfg.TableNames() {
		schema, table, qualified := strings.Cut(name, ".")
		switch {
		case !outbox.IsTablePattern(name):
			out.Add(name)
		case qualified && !outbox.IsTablePattern(table):
			schemas, err := db.MatchSchemas(ctx, schema)
			if err != nil {
				return nil, err
			}
			if len(schemas) == 0 {
				logger.Warn("no schema matches the pattern; nothing to migrate for it", slog.String("table", name), slog.String("database", db.Redacted))
			}
			for _, s := range schemas {
				out.Add(s + "." + table)
			}
		default:
			matched, err := db.MatchTables(ctx, name)
			if err != nil {
				return nil, err
			}
			if len(matched) == 0 {
				logger.Warn("no outbox table matches the pattern; bridge migrate creates tables only for a pattern in the schema part ('tenant_*.outbox')",
					slog.String("table", name), slog.String("database", db.Redacted))
			}
			out.Add(matched...)
		}
	}
	return out.Names, nil
}

// printMigrations is `bridge migrate --print`: the bridge table's
// migrations as SQL for the kind of database the configured URL names,
// without opening the database.
func printMigrations(cmd *cobra.Command, cfg *config.Config, after int64) error {
	if cfg.Source == config.SourceWatermillForwarder {
		return usage("--print prints the bridge table's migrations (source: table); with source: watermill-forwarder, bridge migrate creates the offsets table %s with watermill-sql's own DDL, which it does not print",
			watermillforwarder.OffsetsTable(cfg.Watermill.ForwarderTopic))
	}
	if after < 0 {
		return usage("--after %d: a schema version is 0 or more", after)
	}
	dialect, err := outbox.DialectOfURL(cfg.DatabaseURL())
	if err != nil {
		return usageError{fmt.Errorf("database.url: %w", err)}
	}
	script, err := outbox.MigrationScript(dialect, cfg.Database.Table, after)
	if err != nil {
		return classify(err)
	}
	if cfg.Source == config.SourceMySQLBinlog && dialect == outbox.DialectMySQL {
		position, err := outbox.BinlogPositionScript(cfg.Database.Table)
		if err != nil {
			return classify(err)
		}
		script += position
	}
	_, err = fmt.Fprint(cmd.OutOrStdout(), script)
	return err
}

// migrateWAL repairs the publication and the replication slot of source:
// postgres-wal where it can (postgreswal.Repair), and creates them when
// missing, for each of tables: the first creates the publication and the
// slot, the others are added to the publication.
func migrateWAL(ctx context.Context, cmd *cobra.Command, cfg *config.Config, db *outbox.DB, tables []string) error {
	out := cmd.OutOrStdout()
	for _, table := range tables {
		n := postgreswal.NamesOf(cfg)
		n.Table = table
		repaired, err := postgreswal.Repair(ctx, db.SQL, n)
		if err != nil {
			return classify(err)
		}
		for _, r := range repaired {
			fmt.Fprintln(out, r)
		}
		pub, slot, err := postgreswal.Setup(ctx, db.SQL, n)
		if err != nil {
			return classify(err)
		}
		if pub {
			fmt.Fprintf(out, "created publication %s of the inserts of %s\n", n.Publication, n.Table)
		} else {
			fmt.Fprintf(out, "publication %s of the inserts of %s exists\n", n.Publication, n.Table)
		}
		if slot {
			fmt.Fprintf(out, "created replication slot %s (%s); it keeps WAL until the relay confirms it: run bridge run, or drop it with bridge slot drop\n", n.Slot, postgreswal.Plugin)
		} else if table == tables[len(tables)-1] {
			fmt.Fprintf(out, "replication slot %s exists\n", n.Slot)
		}
	}
	return nil
}
