package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
)

func newSlotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "slot",
		Short: "Manage the replication slot of source: postgres-wal",
		Long: `The postgres-wal source reads the outbox table's inserts from a logical
replication slot (wal.slot), which bridge migrate creates. PostgreSQL keeps the
WAL a slot has not confirmed, without bound unless max_slot_wal_keep_size is set:
a slot whose relay is gone for good can fill the disk. bridge status shows how much
WAL the slot keeps.`,
		// A Run of its own, so that an argument that is not a subcommand is
		// refused (exit 2) rather than answered with the help.
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	drop := acceptsManyTables(&cobra.Command{
		Use:   "drop",
		Short: "Drop the replication slot, releasing the WAL it keeps",
		Long: `Drop the replication slot wal.slot (the publication stays). The relay must be
stopped: a slot in use is not dropped (exit 1). Rows that the slot had not
delivered stay pending in the table; after bridge migrate creates the slot again,
the relay's sweep publishes them (not in commit order). A relay over several tables
(database.tables) has one slot for all of them: the tables configured do not
change what is dropped.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cfg, _, err := setup(cmd, false)
			if err != nil {
				return err
			}
			if !isPostgres(cfg) {
				return usage("bridge slot works on a PostgreSQL outbox (database.url postgres://…); %s has no replication slots", cfg.DatabaseURL())
			}
			db, err := outbox.Open(ctx, cfg.DatabaseURL())
			if err != nil {
				return classify(err)
			}
			defer db.Close()
			info, err := postgreswal.SlotStatus(ctx, db.SQL, cfg.WAL.Slot)
			if err != nil {
				return err
			}
			if err := postgreswal.DropSlot(ctx, db.SQL, cfg.WAL.Slot); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "dropped replication slot %s in %s; it kept %s of WAL\n", cfg.WAL.Slot, db.Redacted, bytesText(info.RetainedBytes))
			return nil
		},
	})
	drop.Args = exactArgs(drop)
	cmd.AddCommand(drop)
	return cmd
}

func isPostgres(cfg *config.Config) bool {
	return cfg.DatabaseDialect() == outbox.DialectPostgres
}

// bytesText prints a byte count in binary units: 0 B, 16 KiB, 1.5 GiB.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
