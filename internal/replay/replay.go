package replay

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
)

// Headers a replayed message carries beside the row's and the relay's own.
const (
	// HeaderReplayID is the replay's id on every message it sends.
	HeaderReplayID = "Outbox-Replay-Id"
)

// ErrPartial is wrapped by Run's error when the replay went through every
// selected row but some could not be sent (Result.Failed): exit 3.
var ErrPartial = errors.New("some rows were not replayed")

// ReplayMsgID is the Nats-Msg-Id of a row replayed into another stream or
// under a prefix: "replay/<replay id>/<original Nats-Msg-Id>", so that one
// replay run is its own dedup scope and the original id stays readable.
func ReplayMsgID(replayID, original string) string { return "replay/" + replayID + "/" + original }

// Selection is which relayed rows a replay sends.
type Selection struct {
	FromID      int64     `json:"from_id,omitempty"` // 0: from the first
	ToID        int64     `json:"to_id,omitempty"`   // 0: to the last
	Since       time.Time `json:"since,omitzero"`    // created_at >= Since
	Until       time.Time `json:"until,omitzero"`    // created_at < Until
	Subject     string    `json:"subject,omitempty"` // NATS wildcards
	OrderingKey *string   `json:"ordering_key,omitempty"`
	Stream      string    `json:"stream,omitempty"` // rows relayed to this stream (--refill-stream)
}

// Destination is where a replay sends: the rows' own stream when both
// fields are empty.
type Destination struct {
	// ToStream is the stream that must store the messages
	// (Nats-Expected-Stream).
	ToStream string `json:"to_stream,omitempty"`
	// SubjectPrefix P republishes under P.<subject>.
	SubjectPrefix string `json:"subject_prefix,omitempty"`
}

// Own reports whether d is the rows' own stream.
func (d Destination) Own() bool { return d.ToStream == "" && d.SubjectPrefix == "" }

// Checkpoint is what a replay writes after every batch and --resume reads.
type Checkpoint struct {
	ReplayID    string      `json:"replay_id"`
	Selection   Selection   `json:"selection"`
	Destination Destination `json:"destination"`
	// AfterID: every selected row up to it is settled (sent, held already,
	// or failed and counted).
	AfterID int64  `json:"after_id"`
	Result  Result `json:"result"`
}

// Result counts what a replay did with the rows it read.
type Result struct {
	Read    int64 `json:"read"`    // selected rows read
	Sent    int64 `json:"sent"`    // published and stored (Duplicates among them)
	Present int64 `json:"present"` // own stream: the stream holds the message already, not sent
	Dup     int64 `json:"duplicates"`
	Failed  int64 `json:"failed"` // not sent: the error is logged
	First   int64 `json:"first_id,omitempty"`
	Last    int64 `json:"last_id,omitempty"`
}

// Config configures Run.
type Config struct {
	Store     *outbox.Store
	JS        jetstream.JetStream
	Publisher *sink.Publisher
	Logger    *slog.Logger
	// Namespace is dedup.namespace.
	Namespace string
	Checkpoint
	// CheckpointFile is where the checkpoint is written after each batch
	// ("" : nowhere).
	CheckpointFile string
	// BatchSize rows and MaxBytes bytes per read (relay.batch_size and
	// relay.max_in_flight_bytes).
	BatchSize int
	MaxBytes  int64
	// Rate bounds rows per second (0: no bound).
	Rate float64
	// DryRun reads and counts, and sends nothing.
	DryRun bool
	// Progress is called at the start and after each batch.
	Progress func(Progress)
}

// Progress is where a replay stands, for its progress line and ETA.
type Progress struct {
	Result
	// StartID is the id the replay (or its resumption) started after;
	// LastID the largest id of the selection then; Ahead the rows it
	// selected after StartID (both read once, at the start: with
	// --subject, which is applied after the read, upper bounds).
	StartID, LastID, Ahead int64
	// Through: every row up to this id has been read.
	Through int64
}

// Fraction is how far the replay is through its rows, 0 to 1, by id.
func (p Progress) Fraction() float64 {
	if p.LastID <= p.StartID {
		return 1
	}
	return min(1, max(0, float64(p.Through-p.StartID)/float64(p.LastID-p.StartID)))
}

// Run replays the selection. It returns the counts and an error when the
// replay stopped (the checkpoint lets --resume continue) or wrapping
// ErrPartial when it finished with rows it could not send.
func Run(ctx context.Context, c Config) (Result, error) {
	r := c.Checkpoint.Result
	after := max(c.AfterID, c.Selection.FromID-1)
	var key = outboxKey(c.Selection.OrderingKey)
	var lim *rate.Limiter
	if c.Rate > 0 {
		lim = rate.NewLimiter(rate.Limit(c.Rate), max(1, min(int(c.Rate), c.BatchSize)))
	}
	params := outbox.ReplayParams{AfterID: after, ToID: c.Selection.ToID, Since: c.Selection.Since, Until: c.Selection.Until,
		OrderingKey: key, Stream: c.Selection.Stream}
	ahead, lastID, err := c.Store.ReplayBounds(ctx, params)
	if err != nil {
		return r, err
	}
	if c.Selection.ToID == 0 && lastID > 0 {
		// The rows relayed by now: rows the live relay relays meanwhile
		// are in their stream already, and the replay has an end.
		c.Selection.ToID = lastID
	}
	prog := Progress{StartID: after, LastID: max(lastID, after), Ahead: ahead, Through: after}
	report := func() {
		if c.Progress != nil {
			prog.Result = r
			c.Progress(prog)
		}
	}
	report()
	streams := map[string]jetstream.Stream{}
	for {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		params.AfterID, params.ToID, params.Limit, params.MaxBytes = after, c.Selection.ToID, c.BatchSize, c.MaxBytes
		rows, err := c.Store.ReplayRead(ctx, params)
		if err != nil {
			return r, err
		}
		if len(rows) == 0 {
			break
		}
		last := rows[len(rows)-1].ID
		sel := rows[:0]
		for _, x := range rows {
			if c.Selection.Subject == "" || server.SubjectMatchesFilter(x.Subject, c.Selection.Subject) {
				sel = append(sel, x)
			}
		}
		if len(sel) > 0 {
			if r.First == 0 {
				r.First = sel[0].ID
			}
			r.Last = sel[len(sel)-1].ID
			r.Read += int64(len(sel))
			if !c.DryRun {
				if lim != nil {
					if err := lim.WaitN(ctx, min(len(sel), lim.Burst())); err != nil {
						return r, err
					}
					for n := len(sel) - lim.Burst(); n > 0; n -= lim.Burst() {
						if err := lim.WaitN(ctx, min(n, lim.Burst())); err != nil {
							return r, err
						}
					}
				}
				if err := c.send(ctx, sel, streams, &r); err != nil {
					return r, err
				}
			}
		}
		after = last
		if !c.DryRun {
			c.AfterID, c.Checkpoint.Result = after, r
			if err := c.save(); err != nil {
				return r, err
			}
		}
		prog.Through = after
		report()
	}
	if r.Failed > 0 {
		return r, fmt.Errorf("%w: %d of %d rows failed (logged)", ErrPartial, r.Failed, r.Read)
	}
	return r, nil
}

func outboxKey(k *string) sql.NullString {
	if k == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *k, Valid: true}
}

// send publishes the rows of one batch in id order and waits for their
// PubAcks. Into the rows' own stream it first leaves out the rows whose
// message the stream holds, and afterwards records where the others were
// stored.
func (c *Config) send(ctx context.Context, rows []outbox.ReplayRow, streams map[string]jetstream.Stream, r *Result) error {
	type item struct {
		row *outbox.ReplayRow
		msg *nats.Msg
	}
	items := make([]item, 0, len(rows))
	if c.Destination.Own() {
		// Each stream's range once per batch, not per row: the live relay
		// grows it meanwhile.
		for name, st := range streams {
			if _, err := st.Info(ctx); err != nil {
				return fmt.Errorf("stream %s: %w", name, err)
			}
		}
	}
	for i := range rows {
		x := &rows[i]
		headers, err := outbox.ParseHeaders(x.Headers)
		if err != nil {
			c.fail(r, x, err)
			continue
		}
		x.Attempt = 1
		m := source.NewDelivery(x.Row, headers, c.Namespace).Msg
		m.Header.Set(HeaderReplayID, c.ReplayID)
		if c.Destination.Own() {
			if x.Stream == "" {
				c.fail(r, x, errors.New("the row records no stream"))
				continue
			}
			held, err := c.holds(ctx, streams, x, m.Header.Get(jetstream.MsgIDHeader))
			if err != nil {
				return err
			}
			if held {
				r.Present++
				continue
			}
			m.Header.Set(jetstream.ExpectedStreamHeader, x.Stream)
		} else {
			m.Header.Set(jetstream.MsgIDHeader, ReplayMsgID(c.ReplayID, m.Header.Get(jetstream.MsgIDHeader)))
			if c.Destination.SubjectPrefix != "" {
				m.Subject = c.Destination.SubjectPrefix + "." + m.Subject
			}
			if c.Destination.ToStream != "" {
				m.Header.Set(jetstream.ExpectedStreamHeader, c.Destination.ToStream)
			}
		}
		items = append(items, item{x, m})
	}
	for attempt := 1; len(items) > 0; attempt++ {
		b, err := c.Publisher.Begin(ctx, len(items))
		if err != nil {
			return err
		}
		errs := make([]error, len(items))
		acks := make([]*jetstream.PubAck, len(items))
		for i, it := range items {
			errs[i] = b.Send(ctx, i, it.msg, nil, time.Time{})
		}
		b.Wait(func(i int, ack *jetstream.PubAck, err error, _ time.Duration) { acks[i], errs[i] = ack, err })
		b.End()
		var again []item
		for i, it := range items {
			if errs[i] != nil {
				if permanent(errs[i]) || attempt >= 5 {
					c.fail(r, it.row, errs[i])
				} else {
					again = append(again, it)
				}
				continue
			}
			if acks[i].Duplicate && c.Destination.Own() {
				// The stream's duplicate window still has the id: stored
				// only if the message at the acknowledged sequence is the
				// row's (the live relay, or a run before this one); a
				// stream purged or a message deleted within the window
				// keeps the id but not the message, and drops the refill.
				stored, err := c.storedAt(ctx, streams[it.row.Stream], acks[i].Sequence, it.msg.Header.Get(jetstream.MsgIDHeader))
				if err != nil {
					return err
				}
				if !stored {
					c.fail(r, it.row, fmt.Errorf("stream %s dropped it as a duplicate within its duplicate window (Nats-Msg-Id %s: the stream was purged or the message deleted less than a window ago) and holds no such message: run the replay again once the window has passed",
						it.row.Stream, it.msg.Header.Get(jetstream.MsgIDHeader)))
					continue
				}
				// Stored by a run killed before it recorded where.
				if acks[i].Sequence != it.row.StreamSeq {
					if _, err := c.Store.ReplayRefilled(ctx, it.row.ID, it.row.Stream, it.row.StreamSeq, acks[i].Sequence); err != nil {
						return err
					}
				}
				r.Present++
				continue
			}
			r.Sent++
			if acks[i].Duplicate {
				r.Dup++
			}
			if c.Destination.Own() && acks[i].Sequence > 0 && acks[i].Sequence != it.row.StreamSeq {
				if _, err := c.Store.ReplayRefilled(ctx, it.row.ID, it.row.Stream, it.row.StreamSeq, acks[i].Sequence); err != nil {
					return err
				}
			}
		}
		if len(again) > 0 {
			// Retried with the same Nats-Msg-Id: a message stored although
			// its PubAck was lost is dropped as a duplicate.
			c.Logger.Warn("replay: publishing again after retryable errors", slog.Int("rows", len(again)), slog.Int("attempt", attempt))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		items = again
	}
	return nil
}

// holds reports whether the row's own stream stores its message: a
// message at the row's stream_seq with the row's Nats-Msg-Id. A sequence
// outside the stream's first and last is not held without a request.
func (c *Config) holds(ctx context.Context, streams map[string]jetstream.Stream, x *outbox.ReplayRow, msgID string) (bool, error) {
	s, ok := streams[x.Stream]
	if !ok {
		var err error
		if s, err = c.JS.Stream(ctx, x.Stream); err != nil {
			return false, fmt.Errorf("stream %s of row %d: %w (create it first: bridge run creates the configured streams)", x.Stream, x.ID, err)
		}
		streams[x.Stream] = s
	}
	if x.StreamSeq == 0 {
		return false, nil
	}
	// The stream's range as read at the start of the batch (send): a row
	// past it is not held (the stream lost it; one the live relay stores
	// meanwhile comes back as a duplicate, which send checks).
	if st := s.CachedInfo().State; x.StreamSeq > st.LastSeq || x.StreamSeq < st.FirstSeq {
		return false, nil
	}
	return c.storedAt(ctx, s, x.StreamSeq, msgID)
}

// storedAt reports whether stream s holds a message with msgID at seq.
func (c *Config) storedAt(ctx context.Context, s jetstream.Stream, seq uint64, msgID string) (bool, error) {
	if s == nil || seq == 0 {
		return false, nil
	}
	m, err := s.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("stream %s: read message %d: %w", s.CachedInfo().Config.Name, seq, err)
	}
	return m.Header.Get(jetstream.MsgIDHeader) == msgID, nil
}

// permanent reports errors that another attempt does not change (as
// internal/forwarder classifies them).
func permanent(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrBadHeaderMsg) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		// 10054 message size exceeds maximum allowed, 10060 expected stream
		// does not match, 10097 header too large, 10109 sealed
		// (nats-server server/jetstream_errors_generated.go).
		case 10054, 10060, 10097, 10109:
			return true
		}
	}
	return false
}

func (c *Config) fail(r *Result, x *outbox.ReplayRow, err error) {
	r.Failed++
	c.Logger.Error("replay: row not sent", slog.Int64("row_id", x.ID), slog.String("subject", x.Subject), slog.Any("error", err))
}

// save writes the checkpoint atomically (a temporary file renamed).
func (c *Config) save() error {
	if c.CheckpointFile == "" {
		return nil
	}
	b, err := json.MarshalIndent(c.Checkpoint, "", "  ")
	if err != nil {
		return err
	}
	tmp := c.CheckpointFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.Rename(tmp, c.CheckpointFile); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

// LoadCheckpoint reads a checkpoint written by a replay.
func LoadCheckpoint(path string) (Checkpoint, error) {
	var cp Checkpoint
	b, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		return cp, err
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		return cp, fmt.Errorf("%s is not a replay checkpoint: %w", path, err)
	}
	if cp.ReplayID == "" {
		return cp, fmt.Errorf("%s is not a replay checkpoint: no replay_id", path)
	}
	return cp, nil
}
