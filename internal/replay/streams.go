package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// StreamCheck compares the relayed rows recording one stream with what the
// stream holds (bridge status).
type StreamCheck struct {
	Stream string `json:"stream"`
	// Rows is how many relayed rows record the stream; RowsFirstSeq and
	// RowsLastSeq their lowest and highest stream_seq.
	Rows         int64  `json:"rows"`
	RowsFirstSeq uint64 `json:"rows_first_seq"`
	RowsLastSeq  uint64 `json:"rows_last_seq"`
	// FirstSeq and LastSeq are the stream's own first and last sequence
	// (StreamInfo.State); 0 when the stream is missing.
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// Messages is how many messages the stream holds (StreamInfo.State).
	Messages uint64 `json:"messages"`
	// Missing: the stream does not exist (JetStream error 10059, stream
	// not found); every row's message is gone.
	Missing bool `json:"missing"`
	// Lost counts the rows whose message the stream no longer has for
	// certain: all of them when it is missing, otherwise those whose
	// stream_seq is outside FirstSeq..LastSeq (removed by the stream's
	// limits, a purge, or the stream deleted and made again).
	Lost int64 `json:"lost"`
	// OtherMessage is set when the oldest row whose stream_seq the stream
	// still has finds another message there (another Nats-Msg-Id): the
	// stream was made again and its sequences reused, so rows inside the
	// range may point at other messages too (only bridge replay
	// --refill-stream reads each one).
	OtherMessage *OtherMessage `json:"other_message,omitempty"`
	// GoneInRange is a lower bound on the rows inside FirstSeq..LastSeq
	// whose message is gone too: the rows pointing into the range less the
	// messages the stream holds (deleted messages, a per-subject limit).
	// Only bridge replay --refill-stream reads each one.
	GoneInRange int64 `json:"gone_in_range,omitempty"`
	// Error is why the stream could not be read ("": it was).
	Error string `json:"error,omitempty"`
}

// OtherMessage is a row whose stream_seq holds another message, or none.
type OtherMessage struct {
	RowID     int64  `json:"row_id"`
	StreamSeq uint64 `json:"stream_seq"`
	// Found is the Nats-Msg-Id at that sequence; "" when the message is
	// deleted.
	Found string `json:"found"`
}

// Suspect reports whether rows of the stream point at messages it no
// longer has.
func (c StreamCheck) Suspect() bool {
	return c.Missing || c.Lost > 0 || c.OtherMessage != nil || c.GoneInRange > 0
}

// CheckStreams compares, for every stream recorded on relayed rows, the
// rows' stream_seq with the stream's range of sequences, and reads the
// message of the oldest row inside the range to see that it is the row's
// (Nats-Msg-Id from outbox.MsgID with namespace). A stream that cannot be
// read is reported in its StreamCheck.Error; the error returned is the
// database's.
func CheckStreams(ctx context.Context, store *outbox.Store, js jetstream.JetStream, namespace string) ([]StreamCheck, error) {
	relayed, err := store.RelayedStreams(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]StreamCheck, 0, len(relayed))
	for _, r := range relayed {
		c := StreamCheck{Stream: r.Stream, Rows: r.Rows, RowsFirstSeq: r.FirstSeq, RowsLastSeq: r.LastSeq}
		s, err := js.Stream(ctx, r.Stream)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			c.Missing, c.Lost = true, r.Rows
			out = append(out, c)
			continue
		case err != nil:
			c.Error = err.Error()
			out = append(out, c)
			continue
		}
		st := s.CachedInfo().State
		c.FirstSeq, c.LastSeq, c.Messages = st.FirstSeq, st.LastSeq, st.Msgs
		if st.Msgs == 0 {
			// An empty stream holds nothing, whatever its range says
			// (0-0 when new, last+1 to last once purged).
			c.Lost = r.Rows
			out = append(out, c)
			continue
		}
		if c.Lost, err = store.RelayedOutside(ctx, r.Stream, st.FirstSeq, st.LastSeq); err != nil {
			return nil, err
		}
		if in := r.Rows - c.Lost; in > int64(st.Msgs) {
			c.GoneInRange = in - int64(st.Msgs)
		}
		row, seq, ok, err := store.RelayedSample(ctx, r.Stream, st.FirstSeq, st.LastSeq)
		if err != nil {
			return nil, err
		}
		if ok {
			m, err := s.GetMsg(ctx, seq)
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
				c.OtherMessage = &OtherMessage{RowID: row.ID, StreamSeq: seq}
			case err != nil:
				c.Error = fmt.Sprintf("read message %d: %v", seq, err)
			default:
				if found := m.Header.Get(jetstream.MsgIDHeader); found != outbox.MsgID(namespace, row.IdempotencyKey) {
					c.OtherMessage = &OtherMessage{RowID: row.ID, StreamSeq: seq, Found: found}
				}
			}
		}
		out = append(out, c)
	}
	return out, nil
}
