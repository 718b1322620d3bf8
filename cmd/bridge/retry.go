package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
other state are left alone and named on stderr; an id with no row makes the
command exit 1 after retrying the others. Fix the cause first (a missing stream, a bad subject
or payload), or the row comes back as a dead letter.`,
		Example: "  bridge retry --id 42 --id 43\n  bridge retry --all-failed",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if allFailed == (len(ids) > 0) {
				return usage("give either --id N (repeatable) or --all-failed")
			}
			return withStore(cmd, func(ctx context.Context, store *outbox.Store) error {
				if allFailed {
					n, err := store.RetryAllDead(ctx)
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%d dead letters back to pending\n", n)
					return nil
				}
				dead, missing, err := deadLetters(ctx, cmd, store, ids)
				if err != nil {
					return err
				}
				n := 0
				if len(dead) > 0 {
					if n, err = store.RetryDead(ctx, dead); err != nil {
						return err
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d dead letters back to pending\n", n)
				if len(missing) > 0 {
					return fmt.Errorf("no row with id %s in %s", joinIDs(missing), store.Table())
				}
				return nil
			})
		},
	}
	cmd.Flags().Int64SliceVar(&ids, "id", nil, "row `id` to retry; repeatable")
	cmd.Flags().BoolVar(&allFailed, "all-failed", false, "retry every permanent_failed row")
	return cmd
}

// deadLetters sorts ids into the permanent_failed rows, those that do not
// exist, and the rest, which it names on stderr as left alone.
func deadLetters(ctx context.Context, cmd *cobra.Command, store *outbox.Store, ids []int64) (dead, missing []int64, err error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	for _, id := range ids {
		st, ok, err := store.StatusOf(ctx, id)
		switch {
		case err != nil:
			return nil, nil, err
		case !ok:
			missing = append(missing, id)
		case st == outbox.StatusPermanentFailed:
			dead = append(dead, id)
		default:
			fmt.Fprintf(cmd.ErrOrStderr(), "row %d is %s, not a dead letter: left alone\n", id, st)
		}
	}
	return dead, missing, nil
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ", ")
}
