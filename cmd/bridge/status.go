package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/replay"
	"github.com/outbox-bridge/bridge/internal/secret"
	"github.com/outbox-bridge/bridge/internal/source/mysqlbinlog"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
)

func newStatusCommand() *cobra.Command {
	var asJSON, checkStreams bool
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show rows per status, the relay's lag, the oldest failed row and recent errors",
		Long: `Show rows per status, the relay's lag (the age of the oldest pending, in-flight
or failed row, as bridge_relay_lag_seconds; docs/OPERATIONS.md), the
oldest failed row and recent errors. With source: postgres-wal also the
replication slot: whether a relay streams from it, the WAL the server keeps for it
(retained), the WAL written since its confirmed position (unconfirmed) and its
wal_status (lost: invalidated by max_slot_wal_keep_size). With source:
mysql-binlog the binary log: the stored position (the rows before it are published
and marked) and when it was stored, the server's position, the relay reading it, and
whether the server still keeps the stored position's file.

With --streams (the default) it connects to NATS as bridge run does and compares,
for every stream recorded on relayed rows, the rows' stream_seq with what the
stream holds: rows whose sequence the stream no longer has (removed by its limits,
purged, or the stream deleted and made again) are counted, and the oldest row
whose sequence it still has is read back to see that it is that row's message.
bridge replay --refill-stream NAME sends the missing ones again. This reads every
relayed row once (one aggregate query); --streams=false leaves it out.

Over several tables (--table repeated, or a pattern such as 'tenant_*.outbox') it
prints a line per table: its rows per status and its lag; --json prints an array of
the documents of each table. The streams are then checked only with --streams
given explicitly (a NATS connection per table).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			var docs []any             // --json over several tables: one document each
			var summary []tableSummary // several tables: a line each
			err = withStore(cmd, func(ctx context.Context, store *outbox.Store, many bool) error {
				recent := 5
				if many && !asJSON {
					recent = 0 // a line per table: no errors, no oldest failed row
				}
				st, err := store.Stats(ctx, recent)
				if err != nil {
					return err
				}
				if many && !asJSON {
					summary = append(summary, tableSummary{store.Table(), st})
					return nil
				}
				// Over several tables the streams are checked when asked
				// for: each table costs a NATS connection.
				checkStreams := checkStreams && (!many || cmd.Flags().Changed("streams"))
				var slot *postgreswal.SlotInfo
				var slotErr error
				if cfg.Source == config.SourcePostgresWAL {
					info, err := postgreswal.SlotStatus(ctx, store.DB().SQL, cfg.WAL.Slot)
					slot, slotErr = &info, err
				}
				var binlog *mysqlbinlog.Info
				var binlogErr error
				if cfg.Source == config.SourceMySQLBinlog {
					info, err := mysqlbinlog.Status(ctx, store.DB(), store.Table())
					binlog, binlogErr = &info, err
				}
				var streams []replay.StreamCheck
				var natsServer string
				var streamsErr error
				if checkStreams {
					natsServer, streams, streamsErr = checkRelayedStreams(ctx, cfg, store)
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
						Database               string               `json:"database"`
						Table                  string               `json:"table"`
						Rows                   map[string]int64     `json:"rows"`
						InFlight               int64                `json:"in_flight"`
						OldestPendingSeconds   *float64             `json:"oldest_pending_seconds"`   // null: no pending row
						OldestUnsettledSeconds *float64             `json:"oldest_unsettled_seconds"` // null: no pending, in-flight or failed row
						OldestFailed           *oldestFailed        `json:"oldest_failed"`            // null: no failed row
						RecentErrors           []rowError           `json:"recent_errors"`
						ReplicationSlot        *slotDoc             `json:"replication_slot,omitempty"` // source: postgres-wal
						BinaryLog              *binlogDoc           `json:"binary_log,omitempty"`       // source: mysql-binlog
						NATS                   string               `json:"nats,omitempty"`             // --streams: the server checked
						Streams                []replay.StreamCheck `json:"streams,omitempty"`          // --streams: relayed rows against their streams
						StreamsError           string               `json:"streams_error,omitempty"`    // --streams: why they were not checked
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
					if slot != nil {
						doc.ReplicationSlot = newSlotDoc(*slot, slotErr, doc.OldestUnsettledSeconds)
					}
					if binlog != nil {
						doc.BinaryLog = newBinlogDoc(*binlog, binlogErr)
					}
					doc.NATS, doc.Streams = natsServer, streams
					if streamsErr != nil {
						doc.StreamsError = streamsErr.Error()
					}
					if many {
						docs = append(docs, doc)
						return nil
					}
					return encodeJSON(out, doc)
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
				if n := st.Rows[outbox.StatusPermanentFailed]; n > 0 {
					// Failed rows are retried by the relay; dead letters wait
					// for an operator: say so beside the line above.
					fmt.Fprintf(out, "dead letters: %d, not retried by the relay (their errors below; bridge retry --table %s --id N, or --all-failed, publishes them again)\n", n, store.Table())
				}
				if st.Rows[outbox.StatusPending]+st.Rows[outbox.StatusFailed] > 0 {
					fmt.Fprintf(out, "lag (oldest pending, in flight or failed): %s\n", st.OldestUnsettled.Round(time.Millisecond))
				}
				if len(st.RecentErrors) > 0 {
					fmt.Fprintln(out, "\nrecent errors:")
					for _, e := range st.RecentErrors {
						fmt.Fprintf(out, "  row %d (%s, attempts %d): %s\n", e.ID, e.Status, e.Attempts, e.LastError)
					}
				}
				if slot != nil {
					printSlot(out, *slot, slotErr, st)
				}
				if binlog != nil {
					printBinlog(out, *binlog, binlogErr)
				}
				if checkStreams {
					printStreams(out, natsServer, streams, streamsErr)
				}
				return nil
			})
			// Over several tables what was read is shown, also when a
			// table failed (told on stderr, and in the exit status).
			switch {
			case docs != nil:
				if jerr := encodeJSON(cmd.OutOrStdout(), docs); err == nil {
					err = jerr
				}
			case summary != nil:
				printSummary(cmd.OutOrStdout(), summary)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&checkStreams, "streams", true, "check relayed rows against what their streams hold (connects to NATS)")
	return acceptsManyTables(cmd)
}

// tableSummary is one table's line of status over several tables.
type tableSummary struct {
	table string
	st    outbox.Stats
}

// printSummary is status over several tables: a line per table with its
// rows per status and its lag.
func printSummary(out io.Writer, tables []tableSummary) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "table")
	for _, s := range outbox.Statuses {
		fmt.Fprintf(tw, "\t%s", s)
	}
	fmt.Fprintln(tw, "\tlag")
	for _, t := range tables {
		fmt.Fprint(tw, t.table)
		for _, s := range outbox.Statuses {
			fmt.Fprintf(tw, "\t%d", t.st.Rows[s])
		}
		lag := "-"
		if t.st.Rows[outbox.StatusPending]+t.st.Rows[outbox.StatusInFlight]+t.st.Rows[outbox.StatusFailed] > 0 {
			lag = t.st.OldestUnsettled.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "\t%s\n", lag)
	}
	tw.Flush()
	fmt.Fprintf(out, "\n%s; bridge status --table NAME shows one with its oldest failed row, recent errors and streams\n", outbox.Count(len(tables), "table"))
}

// encodeJSON writes v as indented JSON.
func encodeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// streamsCheckTimeout bounds the NATS part of status --streams: a NATS
// that does not answer is reported, not waited for.
const streamsCheckTimeout = 10 * time.Second

// checkRelayedStreams connects to NATS as bridge run does and runs
// replay.CheckStreams. An error from NATS says the streams were not
// checked; the rest of status stands.
func checkRelayedStreams(ctx context.Context, cfg *config.Config, store *outbox.Store) (string, []replay.StreamCheck, error) {
	ctx, cancel := context.WithTimeout(ctx, streamsCheckTimeout)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	js, cleanup, err := bridge.NewJetStream(ctx, cfg, quiet)
	if err != nil {
		return "", nil, fmt.Errorf("not checked: %w", err)
	}
	defer cleanup()
	// Not ConnectedUrlRedacted: it leaves a token in the URL.
	server := secret.RedactNATSURLs(js.Conn().ConnectedUrl())
	checks, err := replay.CheckStreams(ctx, store, js, cfg.NamespaceFor(store.Table()))
	return server, checks, err
}

// printStreams writes the --streams part of status.
func printStreams(out io.Writer, server string, streams []replay.StreamCheck, err error) {
	if server != "" {
		server = " on " + server
	}
	fmt.Fprintf(out, "\nstreams (relayed rows against what each stream holds%s):\n", server)
	if err != nil {
		fmt.Fprintf(out, "  %v\n", err)
		return
	}
	if len(streams) == 0 {
		fmt.Fprintln(out, "  no relayed row records a stream")
		return
	}
	for _, c := range streams {
		fmt.Fprintf(out, "  %s: %s, stream_seq %d-%d; ", c.Stream, outbox.Count(int(c.Rows), "relayed row"), c.RowsFirstSeq, c.RowsLastSeq)
		switch {
		case c.Error != "":
			fmt.Fprintf(out, "not checked: %s\n", c.Error)
			continue
		case c.Missing:
			fmt.Fprint(out, "no such stream on that server")
		case c.Messages == 0:
			fmt.Fprint(out, "the stream is empty")
		default:
			fmt.Fprintf(out, "the stream holds %d-%d", c.FirstSeq, c.LastSeq)
		}
		if !c.Suspect() {
			fmt.Fprintln(out, ": ok")
			continue
		}
		if c.Lost > 0 {
			fmt.Fprintf(out, ": %s the stream no longer has", pointAt(c.Lost))
		}
		sep := ":"
		if c.Lost > 0 {
			sep = ";"
		}
		if c.GoneInRange > 0 {
			if c.Lost > 0 {
				fmt.Fprintf(out, "; and at least %d more inside the range it holds (%d messages there)", c.GoneInRange, c.Messages)
			} else {
				fmt.Fprintf(out, ": at least %s inside the range it holds, which has %d messages", pointAt(c.GoneInRange)+" it no longer has", c.Messages)
			}
			sep = ";"
		}
		if o := c.OtherMessage; o != nil {
			found := "no message (deleted)"
			if o.Found != "" {
				found = fmt.Sprintf("another message (Nats-Msg-Id %q)", o.Found)
			}
			fmt.Fprintf(out, "%s row %d's sequence %d holds %s, so rows inside the range may point at other messages too (the stream made again?)", sep, o.RowID, o.StreamSeq, found)
		}
		if c.Missing {
			fmt.Fprintf(out, "\n    is that the server bridge run publishes to (status read the one --nats-url or --nats-listen names)? If so, make the stream again (bridge run creates the configured streams), then bridge replay --refill-stream %s sends them again (--dry-run first)\n", c.Stream)
			continue
		}
		fmt.Fprintf(out, "\n    removed by the stream's limits as intended, or lost: bridge replay --refill-stream %s sends them again (--dry-run first)\n", c.Stream)
	}
}

// pointAt says how many rows point at messages.
func pointAt(n int64) string {
	if n == 1 {
		return "1 row points at a message"
	}
	return fmt.Sprintf("%d rows point at messages", n)
}

// binlogDoc is the binary log in `status --json` (source: mysql-binlog).
type binlogDoc struct {
	Error            string   `json:"error,omitempty"`
	StoredPosition   string   `json:"stored_position,omitempty"` // empty: none stored yet
	StoredAgeSeconds *float64 `json:"stored_age_seconds,omitempty"`
	ServerPosition   string   `json:"server_position"`
	Reader           string   `json:"reader,omitempty"` // empty: no session holds the table's lock (no relay runs, or one waits between read sessions after an error)
	OldestFile       string   `json:"oldest_file"`
	StoredFileKept   bool     `json:"stored_file_kept"`
}

func newBinlogDoc(info mysqlbinlog.Info, err error) *binlogDoc {
	d := &binlogDoc{ServerPosition: info.Server.String(), Reader: info.Reader, OldestFile: info.OldestFile, StoredFileKept: info.Kept}
	if err != nil {
		d.Error = err.Error()
	}
	if info.HasStored {
		d.StoredPosition = info.Stored.String()
		if !info.StoredAt.IsZero() {
			age := time.Since(info.StoredAt).Seconds()
			d.StoredAgeSeconds = &age
		}
	}
	return d
}

// printBinlog prints the binary log of source: mysql-binlog.
func printBinlog(out io.Writer, info mysqlbinlog.Info, err error) {
	fmt.Fprint(out, "\nbinary log:")
	if err != nil {
		fmt.Fprintf(out, " %v\n", err)
		return
	}
	fmt.Fprintln(out)
	if info.HasStored {
		fmt.Fprintf(out, "  stored position: %s, stored %s ago (the rows before it are published and marked)\n", info.Stored, time.Since(info.StoredAt).Round(time.Second))
	} else {
		fmt.Fprintln(out, "  stored position: none yet (bridge migrate or the first run stores the server's)")
	}
	fmt.Fprintf(out, "  server position: %s\n", info.Server)
	if info.Reader != "" {
		fmt.Fprintf(out, "  read by:         %s\n", info.Reader)
	} else {
		// A relay whose read session failed lets go of the lock while it
		// waits to start another (up to 30 s), so that a standby may take
		// over: "none holds it" is what is known, not "none runs".
		fmt.Fprintln(out, "  read by:         no relay holds the table's lock now (rows wait): none runs, or one waits to read again after an error (within 30 s; its /readyz and log say why)")
	}
	switch {
	case !info.HasStored:
	case info.Kept:
		fmt.Fprintf(out, "  oldest file:     %s (the stored position's file %s is kept)\n", info.OldestFile, info.Stored.File)
	default:
		fmt.Fprintf(out, "  oldest file:     %s: the stored position's file %s was purged; the next run starts at the server's position and sweeps the rows committed meanwhile\n", info.OldestFile, info.Stored.File)
	}
}

// slotDoc is the replication slot in `status --json`.
type slotDoc struct {
	Name             string   `json:"name"`
	Error            string   `json:"error,omitempty"` // the slot could not be read, or does not exist
	Active           bool     `json:"active"`
	ActivePID        int      `json:"active_pid,omitempty"`
	WALStatus        string   `json:"wal_status,omitempty"`
	RetainedBytes    int64    `json:"retained_bytes"`
	UnconfirmedBytes int64    `json:"unconfirmed_bytes"`
	SafeWALSize      *int64   `json:"safe_wal_size,omitempty"` // null: max_slot_wal_keep_size not set
	ConfirmedLSN     string   `json:"confirmed_lsn,omitempty"`
	LagSeconds       *float64 `json:"lag_seconds"` // the oldest pending or failed row's age; null: none
}

func newSlotDoc(info postgreswal.SlotInfo, err error, lag *float64) *slotDoc {
	d := &slotDoc{Name: info.Name, LagSeconds: lag}
	if err != nil {
		d.Error = err.Error()
		return d
	}
	d.Active, d.ActivePID, d.WALStatus = info.Active, info.ActivePID, info.WALStatus
	d.RetainedBytes, d.UnconfirmedBytes, d.ConfirmedLSN = info.RetainedBytes, info.UnconfirmedBytes, info.ConfirmedLSN
	if info.SafeWALSize >= 0 {
		d.SafeWALSize = &info.SafeWALSize
	}
	return d
}

// printSlot prints the replication slot of source: postgres-wal. Its lag
// in time is the age of the oldest pending or failed row: a row stays so
// from its commit until the relay marks it relayed, which it does before
// it confirms the row's position.
func printSlot(out io.Writer, info postgreswal.SlotInfo, err error, st outbox.Stats) {
	fmt.Fprintf(out, "\nreplication slot %s:", info.Name)
	if err != nil {
		fmt.Fprintf(out, " %v\n", err)
		return
	}
	state := "inactive (no relay streams from it; it keeps WAL meanwhile)"
	if info.Active {
		state = fmt.Sprintf("active (server process %d)", info.ActivePID)
	}
	fmt.Fprintf(out, " %s, wal_status %s\n", state, info.WALStatus)
	fmt.Fprintf(out, "  retained WAL:    %s\n", bytesText(info.RetainedBytes))
	fmt.Fprintf(out, "  unconfirmed WAL: %s (confirmed position %s)\n", bytesText(info.UnconfirmedBytes), info.ConfirmedLSN)
	if info.SafeWALSize >= 0 {
		fmt.Fprintf(out, "  safe WAL size:   %s before max_slot_wal_keep_size invalidates it\n", bytesText(info.SafeWALSize))
	} else {
		fmt.Fprintln(out, "  max_slot_wal_keep_size is not set: the slot keeps WAL without bound while no relay reads it")
	}
	if st.Rows[outbox.StatusPending]+st.Rows[outbox.StatusFailed] > 0 {
		fmt.Fprintf(out, "  lag:             %s (the oldest pending or failed row)\n", st.OldestUnsettled.Round(time.Millisecond))
	} else {
		fmt.Fprintln(out, "  lag:             none (no pending or failed row)")
	}
}
