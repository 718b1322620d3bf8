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
before now such as 1h, or an RFC 3339 time), --subject (NATS wildcards),
--ordering-key, --refill-stream NAME (the rows relayed to NAME).

Destination and dedup:
  the rows' own stream (no --to-stream/--to-subject-prefix; --refill-stream NAME):
    a row is sent only when its stream no longer holds its message (the stream's
    message at the row's stream_seq is gone or has another Nats-Msg-Id), with its
    original Nats-Msg-Id, and the row's stream_seq is set to where it is stored
    now. Exactly once: running it twice, or killed and resumed, sends nothing
    again, and a row the live relay publishes meanwhile is not doubled.
  --to-stream NAME (the stream must capture the subjects) or --to-subject-prefix P
  (republish under P.<subject>), or both:
    the Nats-Msg-Id is replay/<replay id>/<original Nats-Msg-Id>: one replay run,
    resumed or not, is one dedup scope (within the stream's duplicate window);
    a new run has a new replay id and sends every row again.
Every message carries the row's headers, Nats-Msg-Id, the Outbox-* headers and
Outbox-Replay-Id: <replay id>.

Progress: a bar on a terminal, lines otherwise (rows/s, ETA unknown until the
end of the table is read). The checkpoint (--checkpoint, default
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
				now := time.Now()
				if sel.Since, err = parseWhen("--since", since, now); err != nil {
					return err
				}
				if sel.Until, err = parseWhen("--until", until, now); err != nil {
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
			return withStore(cmd, func(ctx context.Context, store *outbox.Store) error {
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
				stderr := cmd.ErrOrStderr()
				fmt.Fprintf(stderr, "replay %s", cp.ReplayID)
				if checkpoint != "" {
					fmt.Fprintf(stderr, " (checkpoint %s)", checkpoint)
				}
				fmt.Fprintln(stderr)
				prog := newProgress(stderr)
				res, err := replay.Run(ctx, replay.Config{
					Store: store, JS: js, Publisher: pub, Logger: logger, Namespace: cfg.Dedup.Namespace,
					Checkpoint: cp, CheckpointFile: checkpoint, BatchSize: cfg.Relay.BatchSize,
					MaxBytes: int64(cfg.Relay.MaxInFlightBytes), Rate: rateLimit, DryRun: dryRun, Progress: prog.update,
				})
				prog.done(res)
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
				if errors.Is(err, context.Canceled) && checkpoint != "" {
					return fmt.Errorf("replay stopped: continue with bridge replay --resume %s", checkpoint)
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

// parseWhen reads --since/--until: "" (no bound), a duration before now,
// or an RFC 3339 time.
func parseWhen(flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, usage("%s %q: a duration before now (30m, 1h, 168h) or an RFC 3339 time (2026-12-01T10:00:00Z)", flag, v)
}

// progress shows a replay's progress: one line redrawn on a terminal,
// a line every 5 s otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	start time.Time
	last  time.Time
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, tty: ok && term.IsTerminal(int(f.Fd())), start: time.Now()}
}

func (p *progress) line(r replay.Result) string {
	el := time.Since(p.start).Seconds()
	rps := 0.0
	if el > 0 {
		rps = float64(r.Read) / el
	}
	return fmt.Sprintf("%d rows read, %d sent, %d held, %d failed, %.0f rows/s, %s", r.Read, r.Sent, r.Present, r.Failed, rps, time.Since(p.start).Round(time.Second))
}

func (p *progress) update(r replay.Result) {
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\r\x1b[K[%s] %s", bar(r), p.line(r))
	case time.Since(p.last) >= 5*time.Second:
		p.last = time.Now()
		fmt.Fprintln(p.w, "replay progress: "+p.line(r))
	}
}

func bar(r replay.Result) string {
	done := 0
	if r.Read > 0 {
		done = int(20 * (r.Sent + r.Present + r.Failed) / r.Read)
	}
	return strings.Repeat("#", done) + strings.Repeat(" ", 20-done)
}

func (p *progress) done(r replay.Result) {
	if p.tty {
		fmt.Fprintln(p.w)
	}
	fmt.Fprintln(p.w, "replay done: "+p.line(r))
}
