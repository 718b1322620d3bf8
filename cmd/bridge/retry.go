package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

func newRetryCommand() *cobra.Command {
	var (
		ids       []int64
		allFailed bool
	)
	cmd := &cobra.Command{
		Use:   "retry (--id N [--id M]... | --all-failed)",
		Short: "Put dead letters (permanent_failed rows) back to pending",
		Long: `Put permanent_failed rows back to pending with attempts reset to 0, so the relay
publishes them again. last_error is kept until the next attempt. Rows in any
other state are left alone. Fix the cause first (a missing stream, a bad subject
or payload), or the row comes back as a dead letter.`,
		Example: "  bridge retry --id 42 --id 43\n  bridge retry --all-failed",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if allFailed == (len(ids) > 0) {
				return usage("give either --id N (repeatable) or --all-failed")
			}
			return withStore(cmd, func(ctx context.Context, store *outbox.Store) error {
				var n int
				var err error
				if allFailed {
					n, err = store.RetryAllDead(ctx)
				} else {
					n, err = store.RetryDead(ctx, ids)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d dead letters back to pending\n", n)
				return nil
			})
		},
	}
	cmd.Flags().Int64SliceVar(&ids, "id", nil, "row `id` to retry; repeatable")
	cmd.Flags().BoolVar(&allFailed, "all-failed", false, "retry every permanent_failed row")
	return cmd
}
