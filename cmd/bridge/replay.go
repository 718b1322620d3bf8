package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/replay"
	"github.com/outbox-bridge/bridge/internal/sink"
)

func newReplayCommand() *cobra.Command {
	var (
		sel                        replay.Selection
		dest                       replay.Destination
		since, until, key          string
		refill, resume, checkpoint string
		rateLimit                  float64
		dryRun                     bool
	)
	cmd := &cobra.Command{
		Use:   "replay [selection] [--to-stream NAME | --to-subject-prefix P | --refill-stream NAME] [--rate N] [--dry-run] [--resume FILE]",
		Short: "Send relayed rows to JetStream again: refill a lost stream, feed a new consumer",
		Long: `Send relayed (done) rows again, in id order (so per ordering key in id order),
from the rows the table keeps (relay.retention). It reads in batches of
relay.batch_size rows and relay.max_in_flight_bytes, on its own sessions, without
row locks, and never changes a row's status: the live relay keeps running.

Selection: --from-id/--to-id (inclusive), --since/--until (created_at; a duration
before the database's clock now such as 1h, or an RFC 3339 time), --subject (NATS
wildcards), --ordering-key, --refill-stream NAME (the rows relayed to NAME). Without
--to-id, the rows up to the largest id relayed when the replay starts: rows the live
relay relays meanwhile are in their stream already.

Destination and dedup:
  the rows' own stream (no --to-stream/--to-subject-prefix; --refill-stream NAME):
    a row is sent only when its stream no longer holds its message (the stream's
    message at the row's stream_seq is gone or has another Nats-Msg-Id), with its
    original Nats-Msg-Id, and the row's stream_seq is set to where it is stored
    now. Running it twice sends nothing again, and a row the live relay
    publishes meanwhile is not doubled. Killed and resumed: once, unless the
    resume comes later than the stream's duplicate window after the kill (a row
    sent just before the kill, its new stream_seq not yet written, can then be
    stored twice: docs/GUARANTEES.md). A stream purged (or a message deleted)
    less than a duplicate window ago still remembers the ids and drops the
    refill: such rows are reported as failed (exit 3); run it again later.
  --to-stream NAME (the stream must capture the subjects) or --to-subject-prefix P
  (republish under P.<subject>), or both:
    the Nats-Msg-Id is replay/<replay id>/<original Nats-Msg-Id>: one replay run,
    resumed or not, is one dedup scope (within the stream's duplicate window);
    a new run has a new replay id and sends every row again.
Every message carries the row's headers, Nats-Msg-Id, the Outbox-* headers and
Outbox-Replay-Id: <replay id>.

Progress: a bar on a terminal, a line every 5 s otherwise: rows read of the rows
selected at the start, rows/s, and an ETA from how far it is through their ids. The checkpoint (--checkpoint, default
<data_dir>/replay-<replay id>.json) is written after every batch; --resume FILE
continues a stopped replay with its replay id, selection and destination.

Exit codes: 0 every selected row was sent or is held already; 1 stopped by an
error or a signal (resume with --resume); 2 bad usage; 3 finished, but some rows
could not be sent (logged; e.g. a subject the destination does not capture).`,
		Example: `  bridge replay --refill-stream EVENTS
  bridge replay --to-stream AUDIT --to-subject-prefix audit --since 1h
  bridge replay --subject 'orders.>' --from-id 1000 --to-id 2000 --dry-run
  bridge replay --resume ./bridge-data/replay-1a2b3c4d.json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cfg, logger, err := setup(cmd, false)
			if err != nil {
				return err
			}
			cp := replay.Checkpoint{}
			var sinceW, untilW when
			if resume != "" {
				for _, f := range []string{"from-id", "to-id", "since", "until", "subject", "ordering-key", "to-stream", "to-subject-prefix", "refill-stream"} {
					if cmd.Flags().Changed(f) {
						return usage("--resume takes the selection and destination from the checkpoint: leave out --%s", f)
					}
				}
				if cp, err = replay.LoadCheckpoint(resume); err != nil {
					return usage("--resume %s: %v", resume, err)
				}
				if checkpoint == "" {
					checkpoint = resume
				}
			} else {
				if sinceW, err = parseWhen("--since", since); err != nil {
					return err
				}
				if untilW, err = parseWhen("--until", until); err != nil {
					return err
				}
				if cmd.Flags().Changed("ordering-key") {
					sel.OrderingKey = &key
				}
				if sel.Subject != "" && !server.IsValidSubject(sel.Subject) {
					return usage("--subject %q is not a valid subject: dot-separated tokens, * for one token, a final > for the rest", sel.Subject)
				}
				if dest.SubjectPrefix != "" && (!server.IsValidPublishSubject(dest.SubjectPrefix) || strings.HasSuffix(dest.SubjectPrefix, ".")) {
					return usage("--to-subject-prefix %q is not a subject prefix: dot-separated tokens without wildcards, such as replay or audit.v1", dest.SubjectPrefix)
				}
				if refill != "" {
					if !dest.Own() {
						return usage("--refill-stream %s sends into the rows' own stream: leave out --to-stream and --to-subject-prefix", refill)
					}
					sel.Stream = refill
				}
				if sel.ToID > 0 && sel.FromID > sel.ToID {
					return usage("--from-id %d is after --to-id %d", sel.FromID, sel.ToID)
				}
				id := make([]byte, 8)
				_, _ = rand.Read(id)
				cp = replay.Checkpoint{ReplayID: hex.EncodeToString(id), Selection: sel, Destination: dest}
			}
			if rateLimit < 0 {
				return usage("--rate %v: rows per second, 0 (no bound) or more", rateLimit)
			}
			if checkpoint == "" && !dryRun {
				checkpoint = filepath.Join(cfg.DataDir, "replay-"+cp.ReplayID+".json")
				if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
					return fmt.Errorf("checkpoint directory: %w", err)
				}
			}
			if dryRun {
				checkpoint = ""
			}
			return withStore(cmd, func(ctx context.Context, store *outbox.Store, _ bool) error {
				if resume == "" {
					// created_at is the database's clock: so is "1h ago".
					var now time.Time
					if sinceW.relative || untilW.relative {
						if now, err = store.Now(ctx); err != nil {
							return err
						}
					}
					cp.Selection.Since, cp.Selection.Until = sinceW.resolve(now), untilW.resolve(now)
					if sel := cp.Selection; !sel.Since.IsZero() && !sel.Until.IsZero() && !sel.Until.After(sel.Since) {
						return usage("--until %s is not after --since %s: no row is created in that range", until, since)
					}
				}
				js, cleanup, err := bridge.NewJetStream(ctx, cfg, logger)
				if err != nil {
					return classify(err)
				}
				defer cleanup()
				pub, err := sink.New(js, sink.Config{PublishTimeout: cfg.Relay.PublishTimeout, Conn: js.Conn()})
				if err != nil {
					return err
				}
				defer pub.Close()
				if to := cp.Destination.ToStream; to != "" {
					if _, err := js.Stream(ctx, to); err != nil {
						return usage("--to-stream %s: %v (create it first; it must capture the subjects sent to it)", to, err)
					}
				}
				stderr := cmd.ErrOrStderr()
				fmt.Fprintf(stderr, "replay %s", cp.ReplayID)
				if checkpoint != "" {
					fmt.Fprintf(stderr, " (checkpoint %s)", checkpoint)
				}
				fmt.Fprintln(stderr)
				prog := newProgress(stderr)
				res, err := replay.Run(ctx, replay.Config{
					Store: store, JS: js, Publisher: pub, Logger: logger, Namespace: cfg.NamespaceFor(store.Table()),
					Checkpoint: cp, CheckpointFile: checkpoint, BatchSize: cfg.Relay.BatchSize,
					MaxBytes: int64(cfg.Relay.MaxInFlightBytes), Rate: rateLimit, DryRun: dryRun, Progress: prog.update,
				})
				prog.done(res, err)
				out := cmd.OutOrStdout()
				if dryRun {
					fmt.Fprintf(out, "dry run: %d rows selected", res.Read)
					if res.Read > 0 {
						fmt.Fprintf(out, ", first id %d, last id %d", res.First, res.Last)
					}
					fmt.Fprintln(out, "; nothing sent")
				} else {
					fmt.Fprintf(out, "replay %s: %d rows selected, %d sent (%d duplicates dropped by the stream), %d held already, %d failed\n",
						cp.ReplayID, res.Read, res.Sent, res.Dup, res.Present, res.Failed)
				}
				_, statErr := os.Stat(checkpoint)
				switch {
				case err == nil || errors.Is(err, replay.ErrPartial) || checkpoint == "":
				case statErr != nil:
					// Stopped before its first checkpoint: nothing to resume.
					return fmt.Errorf("replay stopped before its first batch was sent: %w; run it again", err)
				case errors.Is(err, context.Canceled):
					return fmt.Errorf("replay stopped: continue with bridge replay --resume %s", checkpoint)
				default:
					// A broker or database outage: the checkpoint holds what
					// was sent.
					return fmt.Errorf("replay stopped: %w; continue with bridge replay --resume %s", err, checkpoint)
				}
				return err
			})
		},
	}
	f := cmd.Flags()
	f.Int64Var(&sel.FromID, "from-id", 0, "first row id (inclusive)")
	f.Int64Var(&sel.ToID, "to-id", 0, "last row id (inclusive)")
	f.StringVar(&since, "since", "", "rows created at or after `when`: a duration before now (1h) or an RFC 3339 time")
	f.StringVar(&until, "until", "", "rows created before `when`: a duration before now or an RFC 3339 time")
	f.StringVar(&sel.Subject, "subject", "", "rows whose subject matches `pattern` (NATS wildcards * and >)")
	f.StringVar(&key, "ordering-key", "", "rows of ordering key `key`")
	f.StringVar(&dest.ToStream, "to-stream", "", "the stream `name` that must store the messages (it must capture their subjects)")
	f.StringVar(&dest.SubjectPrefix, "to-subject-prefix", "", "republish under `prefix`.<subject>")
	f.StringVar(&refill, "refill-stream", "", "the rows relayed to stream `name` whose messages it no longer holds, sent into it again")
	f.Float64Var(&rateLimit, "rate", 0, "at most `n` rows per second (0: no bound)")
	f.BoolVar(&dryRun, "dry-run", false, "count the selected rows and print the first and last, send nothing")
	f.StringVar(&resume, "resume", "", "continue the replay of checkpoint `file`")
	f.StringVar(&checkpoint, "checkpoint", "", "write the checkpoint to `file` (default <data_dir>/replay-<id>.json)")
	return cmd
}

// when is a --since or --until bound: a time, or a duration before the
// database's clock (created_at is written by it), resolved once connected.
type when struct {
	at       time.Time     // an RFC 3339 time; zero: no bound, or relative
	ago      time.Duration // relative: this long before the database's now
	relative bool          // given as a duration
}

// resolve returns the bound against the database's clock now.
func (w when) resolve(now time.Time) time.Time {
	if w.relative {
		return now.Add(-w.ago)
	}
	return w.at
}

// parseWhen reads --since/--until: "" (no bound), a duration before now,
// or an RFC 3339 time.
func parseWhen(flag, v string) (when, error) {
	if v == "" {
		return when{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return when{ago: d, relative: true}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return when{at: t}, nil
	}
	return when{}, usage("%s %q: a duration before now (30m, 1h, 168h) or an RFC 3339 time (2026-12-01T10:00:00Z)", flag, v)
}

// progress shows a replay's progress: one line redrawn on a terminal,
// a line every 5 s otherwise; rows/s over this run, the ETA from how far
// it is through the ids it selected at its start.
type progress struct {
	w     io.Writer
	tty   bool
	start time.Time
	last  time.Time
	// read0 and total: rows read before this run (a resumed replay's
	// checkpoint) and those plus the rows selected at the start.
	read0, total int64
	begun        bool
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, tty: ok && term.IsTerminal(int(f.Fd())), start: time.Now()}
}

// line is the progress line; eta, when not "", ends it.
func (p *progress) line(r replay.Result, eta string) string {
	el := time.Since(p.start)
	rps := 0.0
	if el > 0 {
		rps = float64(r.Read-p.read0) / el.Seconds()
	}
	l := fmt.Sprintf("%d of %d rows read, %d sent, %d held, %d failed, %.0f rows/s, %s",
		r.Read, max(p.total, r.Read), r.Sent, r.Present, r.Failed, rps, el.Round(time.Second))
	if eta != "" {
		l += ", " + eta
	}
	return l
}

func (p *progress) update(r replay.Progress) {
	if !p.begun {
		// The first call, before any read.
		p.begun, p.read0, p.total = true, r.Read, r.Read+r.Ahead
	}
	eta := "ETA unknown"
	if f := r.Fraction(); f >= 1 {
		eta = "ETA 0s"
	} else if f > 0 {
		eta = "ETA " + time.Duration(float64(time.Since(p.start))*(1-f)/f).Round(time.Second).String()
	}
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\r\x1b[K[%s] %s", bar(r.Fraction()), p.line(r.Result, eta))
	case time.Since(p.last) >= 5*time.Second:
		p.last = time.Now()
		fmt.Fprintln(p.w, "replay progress: "+p.line(r.Result, eta))
	}
}

func bar(f float64) string {
	done := int(20 * f)
	return strings.Repeat("#", done) + strings.Repeat(" ", 20-done)
}

// done ends the progress: "replay done" when the replay went through its
// rows (err nil or replay.ErrPartial), "replay stopped" otherwise.
func (p *progress) done(r replay.Result, err error) {
	if p.tty {
		fmt.Fprintln(p.w)
	}
	what := "replay done: "
	if err != nil && !errors.Is(err, replay.ErrPartial) {
		what = "replay stopped: "
	}
	fmt.Fprintln(p.w, what+p.line(r, ""))
}
