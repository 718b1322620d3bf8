package consumer

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Entry states, stored in the "state" field of a dedup entry's value.
const (
	// stateProcessing is written by the Create that claims a message,
	// before its handler runs.
	stateProcessing = "processing"
	// stateDone is written after the handler succeeded, before the ack;
	// only with WithProcessingLease.
	stateDone = "done"
)

// entry is the JSON value of a dedup entry. Only State is read back (and
// only with a processing lease); the other fields are for operators reading
// the bucket with `nats kv get`.
type entry struct {
	State     string    `json:"state"`
	At        time.Time `json:"at"` // writer's clock, UTC; informational
	MsgID     string    `json:"msg_id"`
	Stream    string    `json:"stream,omitempty"`
	StreamSeq uint64    `json:"stream_seq,omitempty"`
	Consumer  string    `json:"consumer,omitempty"`
}

func newEntry(state, msgID string, md *jetstream.MsgMetadata) entry {
	e := entry{State: state, At: time.Now().UTC(), MsgID: msgID}
	if md != nil {
		e.Stream, e.StreamSeq, e.Consumer = md.Stream, md.Sequence.Stream, md.Consumer
	}
	return e
}

func (e entry) encode() []byte {
	// Marshaling a struct of strings, a time and an integer cannot fail.
	b, _ := json.Marshal(e)
	return b
}

func decodeEntry(b []byte) (entry, error) {
	var e entry
	if err := json.Unmarshal(b, &e); err != nil {
		return entry{}, fmt.Errorf("decode dedup entry: %w", err)
	}
	return e, nil
}
