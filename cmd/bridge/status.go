package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

func newStatusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show rows per status, the relay's lag, the oldest failed row and recent errors",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, store *outbox.Store) error {
				st, err := store.Stats(ctx, 5)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					type rowError struct {
						ID        int64  `json:"id"`
						Status    string `json:"status"`
						Attempts  int    `json:"attempts"`
						LastError string `json:"last_error"`
					}
					type oldestFailed struct {
						ID         int64   `json:"id"`
						Subject    string  `json:"subject"`
						Attempts   int     `json:"attempts"`
						AgeSeconds float64 `json:"age_seconds"`
						LastError  string  `json:"last_error"`
					}
					doc := struct {
						Database               string           `json:"database"`
						Table                  string           `json:"table"`
						Rows                   map[string]int64 `json:"rows"`
						InFlight               int64            `json:"in_flight"`
						OldestPendingSeconds   *float64         `json:"oldest_pending_seconds"`   // null: no pending row
						OldestUnsettledSeconds *float64         `json:"oldest_unsettled_seconds"` // null: no pending or failed row
						OldestFailed           *oldestFailed    `json:"oldest_failed"`            // null: no failed row
						RecentErrors           []rowError       `json:"recent_errors"`
					}{
						Database: store.DB().Redacted, Table: store.Table(), Rows: map[string]int64{},
						InFlight: st.Rows[outbox.StatusInFlight], RecentErrors: []rowError{},
					}
					if st.Rows[outbox.StatusPending] > 0 {
						age := st.OldestPending.Seconds()
						doc.OldestPendingSeconds = &age
					}
					if st.Rows[outbox.StatusPending]+st.Rows[outbox.StatusFailed] > 0 {
						age := st.OldestUnsettled.Seconds()
						doc.OldestUnsettledSeconds = &age
					}
					if f := st.OldestFailed; f != nil {
						doc.OldestFailed = &oldestFailed{f.ID, f.Subject, f.Attempts, f.Age.Seconds(), f.LastError}
					}
					for s, n := range st.Rows {
						doc.Rows[string(s)] = n
					}
					for _, e := range st.RecentErrors {
						doc.RecentErrors = append(doc.RecentErrors, rowError{e.ID, string(e.Status), e.Attempts, e.LastError})
					}
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					return enc.Encode(doc)
				}
				fmt.Fprintf(out, "table %s in %s\n\n", store.Table(), store.DB().Redacted)
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				for _, s := range outbox.Statuses {
					fmt.Fprintf(tw, "%s\t%d\n", s, st.Rows[s])
				}
				tw.Flush()
				fmt.Fprintln(out)
				if st.Rows[outbox.StatusPending] > 0 {
					fmt.Fprintf(out, "oldest pending: %s\n", st.OldestPending.Round(time.Millisecond))
				} else {
					fmt.Fprintln(out, "oldest pending: none")
				}
				if f := st.OldestFailed; f != nil {
					fmt.Fprintf(out, "oldest failed: row %d (%s, attempts %d, %s old): %s\n", f.ID, f.Subject, f.Attempts, f.Age.Round(time.Second), f.LastError)
				} else {
					fmt.Fprintln(out, "oldest failed: none")
				}
				if st.Rows[outbox.StatusPending]+st.Rows[outbox.StatusFailed] > 0 {
					fmt.Fprintf(out, "lag (oldest pending or failed): %s\n", st.OldestUnsettled.Round(time.Millisecond))
				}
				if len(st.RecentErrors) > 0 {
					fmt.Fprintln(out, "\nrecent errors:")
					for _, e := range st.RecentErrors {
						fmt.Fprintf(out, "  row %d (%s, attempts %d): %s\n", e.ID, e.Status, e.Attempts, e.LastError)
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
