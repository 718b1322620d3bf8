package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder"
)

// migrateWatermill is `bridge migrate` with source: watermill-forwarder:
// it creates the offsets table of the forwarder topic, the one table the
// relay needs that the service's watermill-sql publisher does not create.
func migrateWatermill(ctx context.Context, cmd *cobra.Command, cfg *config.Config, logger *slog.Logger) error {
	db, cleanup, err := bridge.NewDB(ctx, cfg, logger)
	if err != nil {
		return classify(err)
	}
	defer cleanup()
	topic := cfg.Watermill.ForwarderTopic
	created, messages, err := watermillforwarder.Migrate(ctx, db, topic)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if created {
		fmt.Fprintf(out, "created offsets table %s in %s\n", watermillforwarder.OffsetsTable(topic), db.Redacted)
	} else {
		fmt.Fprintf(out, "offsets table %s in %s is up to date\n", watermillforwarder.OffsetsTable(topic), db.Redacted)
	}
	if !messages {
		fmt.Fprintf(out, "note: table %s does not exist yet; the service's watermill-sql publisher creates it (AutoInitializeSchema) or its own migrations do, and `bridge run` needs it\n",
			watermillforwarder.MessagesTable(topic))
	}
	return nil
}
