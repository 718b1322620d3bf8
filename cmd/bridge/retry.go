package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// retryBatch bounds the ids of one retry statement.
const retryBatch = 1000

func newRetryCommand() *cobra.Command {
	var (
		ids       []int64
		allFailed bool
		subject   string
	)
	cmd := &cobra.Command{
		Use:   "retry (--id N [--id M]... | --subject PATTERN | --all-failed)",
		Short: "Send failed rows and dead letters again, now",
		Long: `Make rows that failed claimable at once: a dead letter (permanent_failed) goes
back to pending with attempts reset to 0; a failed row waiting out its backoff is
claimable now, its attempts kept. last_error is kept until the next attempt.
With source: postgres-wal or mysql-binlog the rows are not in the log again:
the relay's next sweep sends them (wal.sweep_interval or
binlog.sweep_interval, 1m by default).

Select the rows by id (--id, repeatable), by subject (--subject, a NATS subject
where * matches one token and > the rest: 'orders.>'), or all of them
(--all-failed). With --id, rows in any other state are left alone and named on
stderr, and an id with no row makes the command exit 1 after retrying the
others. Fix the cause first (a missing stream, a permission, a bad subject or
payload), or the row fails again.`,
		Example: "  bridge retry --id 42 --id 43\n  bridge retry --subject 'orders.>'\n  bridge retry --all-failed",
		RunE: func(cmd *cobra.Command, _ []string) error {
			given := 0
			for _, set := range []bool{len(ids) > 0, allFailed, subject != ""} {
				if set {
					given++
				}
			}
			switch {
			case given == 0:
				return usage("give one of --id N (repeatable), --subject PATTERN or --all-failed")
			case given > 1:
				return usage("give only one of --id N (repeatable), --subject PATTERN or --all-failed: they select the rows in different ways")
			}
			if subject != "" && !server.IsValidSubject(subject) {
				return usage("--subject %q is not a NATS subject: dot-separated tokens, * for one token, > for the rest at the end, such as orders.> or orders.*.created", subject)
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if len(ids) > 0 && len(cfg.Database.Tables) > 0 {
				return usage("--id names rows of one outbox table; give one --table with it, not several or a pattern")
			}
			when := retriedWhen(cfg)
			return withStore(cmd, func(ctx context.Context, store *outbox.Store, many bool) error {
				var failed, dead, missing []int64
				var err error
				switch {
				case allFailed:
					nd, err := store.RetryAllDead(ctx)
					if err != nil {
						return err
					}
					nf, err := store.RetryAllFailed(ctx)
					if err != nil {
						return err
					}
					printRetried(cmd, nd, nf, when, inTable(store, many))
					return nil
				case subject != "":
					failed, dead, err = store.Retryable(ctx, func(s string) bool { return server.SubjectMatchesFilter(s, subject) })
				default:
					failed, dead, missing, err = retryable(ctx, cmd, store, ids)
				}
				if err != nil {
					return err
				}
				nd, nf, err := retryIDs(ctx, store, dead, failed)
				if err != nil {
					return err
				}
				printRetried(cmd, nd, nf, when, inTable(store, many))
				if len(missing) > 0 {
					return fmt.Errorf("no row with id %s in %s", joinIDs(missing), store.Table())
				}
				return nil
			})
		},
	}
	cmd.Flags().Int64SliceVar(&ids, "id", nil, "row `id` to retry; repeatable")
	cmd.Flags().StringVar(&subject, "subject", "", "retry the failed rows and dead letters whose subject matches `pattern` (NATS wildcards * and >)")
	cmd.Flags().BoolVar(&allFailed, "all-failed", false, "retry every failed row and every dead letter")
	return acceptsManyTables(cmd)
}

func printRetried(cmd *cobra.Command, dead, failed int, when, where string) {
	fmt.Fprintf(cmd.OutOrStdout(), "%s back to pending, %s %s%s\n", outbox.Count(dead, "dead letter"), outbox.Count(failed, "failed row"), when, where)
}

// retriedWhen says when the relay of cfg sends a retried row: a table
// relay claims it at once; a log source's sweep takes it, the log holding
// no new row for it.
func retriedWhen(cfg *config.Config) string {
	switch cfg.Source {
	case config.SourcePostgresWAL:
		return fmt.Sprintf("due now (the relay's next sweep sends them: wal.sweep_interval, %s in this configuration)", cfg.WAL.SweepInterval)
	case config.SourceMySQLBinlog:
		return fmt.Sprintf("due now (the relay's next sweep sends them: binlog.sweep_interval, %s in this configuration)", cfg.Binlog.SweepInterval)
	}
	return "claimable now"
}

// retryIDs retries dead and failed, in batches.
func retryIDs(ctx context.Context, store *outbox.Store, dead, failed []int64) (nd, nf int, err error) {
	for batch := range slices.Chunk(dead, retryBatch) {
		n, err := store.RetryDead(ctx, batch)
		if err != nil {
			return nd, nf, err
		}
		nd += n
	}
	for batch := range slices.Chunk(failed, retryBatch) {
		n, err := store.RetryFailed(ctx, batch)
		if err != nil {
			return nd, nf, err
		}
		nf += n
	}
	return nd, nf, nil
}

// retryable sorts ids into the failed rows, the dead letters, those that
// do not exist, and the rest, which it names on stderr as left alone.
func retryable(ctx context.Context, cmd *cobra.Command, store *outbox.Store, ids []int64) (failed, dead, missing []int64, err error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	for _, id := range ids {
		st, ok, err := store.StatusOf(ctx, id)
		switch {
		case err != nil:
			return nil, nil, nil, err
		case !ok:
			missing = append(missing, id)
		case st == outbox.StatusPermanentFailed:
			dead = append(dead, id)
		case st == outbox.StatusFailed:
			failed = append(failed, id)
		default:
			fmt.Fprintf(cmd.ErrOrStderr(), "row %d is %s, neither failed nor a dead letter: left alone\n", id, st)
		}
	}
	return failed, dead, missing, nil
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ", ")
}
