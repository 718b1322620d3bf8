package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

func newPurgeCommand() *cobra.Command {
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "purge --done-older-than D",
		Short: "Delete relayed (done) rows relayed more than D ago",
		Long: `Delete done rows whose PubAck is older than D (database clock), in batches of
1000. The relay does this itself for rows older than relay.retention (24h).
Pending, in-flight, failed and dead-letter rows are never deleted.`,
		Example: "  bridge purge --done-older-than 1h",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < 0 {
				return usage("--done-older-than %s: must not be negative", olderThan)
			}
			return withStore(cmd, func(ctx context.Context, store *outbox.Store, many bool) error {
				n, err := store.PurgeDoneOlderThan(ctx, olderThan, outbox.PurgeBatchDefault)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %s relayed more than %s ago%s\n", outbox.Count(n, "done row"), olderThan, inTable(store, many))
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&olderThan, "done-older-than", 0, "age `D` of the PubAck (required), e.g. 1h, 0s for all")
	_ = cmd.MarkFlagRequired("done-older-than")
	return acceptsManyTables(cmd)
}
