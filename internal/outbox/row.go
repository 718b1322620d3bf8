package outbox

import (
	"database/sql"
	"fmt"
	"time"
)

// Status is the state of an outbox row. See docs/DESIGN.md, "The life of a row".
type Status string

// The states of a row.
const (
	StatusPending         Status = "pending"
	StatusInFlight        Status = "in_flight"
	StatusDone            Status = "done"
	StatusFailed          Status = "failed"
	StatusPermanentFailed Status = "permanent_failed"
)

// Statuses lists every status in the order of a row's life.
var Statuses = []Status{StatusPending, StatusInFlight, StatusFailed, StatusDone, StatusPermanentFailed}

// Row is a claimed outbox row.
type Row struct {
	ID             int64
	IdempotencyKey string
	Subject        string
	// Payload is the payload column, or nil when PayloadLeftOut.
	Payload []byte
	// PayloadSize is the payload's length in bytes, computed by the
	// database: len(Payload), or the length of the payload left out.
	PayloadSize int64
	// PayloadLeftOut reports that the claim did not read the payload: it
	// was longer than ClaimParams.MaxPayload.
	PayloadLeftOut bool
	// Headers is the raw JSON of the headers column, not yet validated.
	Headers     []byte
	OrderingKey sql.NullString
	// Attempt is the attempt number of this claim, starting at 1. Together
	// with the owner it fences the marks of this claim.
	Attempt   int
	CreatedAt time.Time
	ClaimedAt time.Time
	// FirstClaimedAt is when the row was first claimed (database clock):
	// equal to ClaimedAt at its first claim, earlier when it was claimed
	// before — also before a `bridge retry`, which resets the attempts but
	// not this.
	FirstClaimedAt time.Time
}

// Size is what a claimed row takes in the relay's memory, as
// relay.max_in_flight_bytes counts it: the payload read and the headers.
func (r *Row) Size() int64 { return int64(len(r.Payload)) + int64(len(r.Headers)) }

// Done records a PubAck for a claimed row.
type Done struct {
	ID      int64
	Attempt int
	Stream  string
	// Seq is the stream sequence of the stored message; for a duplicate it is
	// the original's sequence, which can be 0 on an Interest stream.
	Seq uint64
}

// Failure records a failed attempt for a claimed row.
type Failure struct {
	ID      int64
	Attempt int
	// Err is stored as last_error, escaped and cut by SanitizeError.
	Err string
	// Permanent moves the row to permanent_failed (a dead letter);
	// otherwise it becomes failed and is claimed again after Backoff.
	Permanent bool
	// Backoff is added to the database clock to set available_at.
	Backoff time.Duration
	// Refund gives the attempt back: the row was released without a publish
	// outcome of its own (shutdown, lost connection), so it does not count
	// towards max_attempts, and the row goes back to pending rather than
	// failed: nothing went wrong with it.
	Refund bool
	// Held gives the attempt back too, but the row becomes failed with its
	// last_error, claimable again after Backoff: its destination refuses it
	// for now (a stream the duplicate-window guard finds unsafe), and
	// `bridge status` shows why.
	Held bool
}

func (f Failure) status() Status {
	switch {
	case f.Permanent:
		return StatusPermanentFailed
	case f.Refund && !f.Held:
		return StatusPending
	}
	return StatusFailed
}

// dbTime scans a timestamp stored as a time (PostgreSQL timestamptz) or as
// text (SQLite, written by strftime('%Y-%m-%dT%H:%M:%fZ')).
type dbTime struct{ t *time.Time }

var timeLayouts = []string{
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999",
}

func (d dbTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*d.t = time.Time{}
		return nil
	case time.Time:
		*d.t = v.UTC()
		return nil
	case string:
		return d.parse(v)
	case []byte:
		return d.parse(string(v))
	}
	return fmt.Errorf("scan time: unsupported type %T", src)
}

func (d dbTime) parse(s string) error {
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			*d.t = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("scan time: %q is not an RFC 3339 timestamp", s)
}
