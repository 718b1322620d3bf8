package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

func newMigrateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox table",
		Long: `Create or upgrade the outbox table (--table) in the configured database
(--database-url) with its indexes. Migrations are versioned and embedded; applied
versions are recorded in the table <table>_migrations. Safe to run again.

With source: watermill-forwarder it creates the offsets table
watermill_offsets_<watermill.forwarder_topic> instead (watermill-sql's own DDL).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cfg, logger, err := setup(cmd, false)
			if err != nil {
				return err
			}
			if cfg.Source == config.SourceWatermillForwarder {
				return migrateWatermill(ctx, cmd, cfg, logger)
			}
			// Opened directly: bridge.NewDB migrates the embedded database
			// by itself, and this command should report what it applied.
			db, err := outbox.OpenSession(ctx, cfg.DatabaseURL(), outbox.ConfiguredSession(cfg))
			if err != nil {
				return classify(err)
			}
			defer db.Close()
			applied, err := outbox.Migrate(ctx, db, cfg.Database.Table)
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "outbox table %s in %s is up to date\n", cfg.Database.Table, db.Redacted)
				return nil
			}
			for _, m := range applied {
				fmt.Fprintf(cmd.OutOrStdout(), "applied migration %05d to %s in %s\n", m.Version, cfg.Database.Table, db.Redacted)
			}
			return nil
		},
	}
}
