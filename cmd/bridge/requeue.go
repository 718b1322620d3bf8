package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

func newRequeueCommand() *cobra.Command {
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "requeue --older-than D",
		Short: "In-flight recovery by hand: requeue rows in flight longer than D",
		Long: `Move rows that have been in_flight longer than D (database clock) to failed,
claimable at once, with last_error "requeued after inflight timeout"; attempts are
kept. The relay does this itself at every tick for rows older than
relay.inflight_timeout. A requeued row is published again with the same
Nats-Msg-Id: JetStream drops the repeat within the stream's duplicate window.`,
		Example: "  bridge requeue --older-than 5m",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan <= 0 {
				return usage("--older-than %s: must be a positive duration such as 30s or 5m", olderThan)
			}
			return withStore(cmd, func(ctx context.Context, store *outbox.Store, many bool) error {
				n, err := store.RequeueInflightOlderThan(ctx, olderThan)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "requeued %s in flight for more than %s%s\n", outbox.Count(n, "row"), olderThan, inTable(store, many))
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "lease age `D` (required), e.g. 30s, 5m")
	_ = cmd.MarkFlagRequired("older-than")
	return acceptsManyTables(cmd)
}
