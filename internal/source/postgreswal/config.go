package postgreswal

import (
	"cmp"
	"fmt"
	"time"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// Defaults of Config of the source's own; the others are those of the
// relay.* and wal.* keys (package config) and the table source's.
const (
	// StatusIntervalDefault is the longest the relay goes without telling
	// the server its confirmed position (a standby status update); it tells
	// it sooner, within statusMinInterval, whenever the position moved.
	// PostgreSQL ends a replication connection that says nothing for
	// wal_sender_timeout (60 s by default).
	StatusIntervalDefault = 10 * time.Second
)

// statusMinInterval spaces the status updates that report a new confirmed
// position.
const statusMinInterval = 100 * time.Millisecond

// Config configures a Subscriber.
type Config struct {
	// Names are the table, its publication and the slot. Required.
	Names
	// ReplicationURL is the postgres:// URL of the replication connection
	// (replication=database is added). Required.
	ReplicationURL string
	// MaxInFlight bounds the rows read (from the slot, or by the sweep)
	// and not yet settled (published and marked, or dead-lettered);
	// reading pauses at the bound. Defaults to 2000 rows.
	MaxInFlight int
	// MaxInFlightBytes bounds the bytes (payloads and headers) of those
	// rows that are held in memory: a row's share is given back at its
	// PubAck (or when it becomes a dead letter). Reading pauses before the
	// row that would pass the bound, unless nothing is held: one row
	// always fits. Defaults to 32 MiB.
	MaxInFlightBytes int64
	// MaxPayload, when set, returns the NATS server's max_payload in bytes
	// (nats.Conn.MaxPayload), or 0 when unknown. A row whose payload
	// cannot fit it with the message's headers becomes a dead letter from
	// its length: its payload is dropped as soon as it is read. Defaults
	// to nil: the publish refuses such a row (a dead letter too).
	MaxPayload func() int64
	// AckDeadline is how long an emitted message may stay neither acked
	// nor nacked; then its outcome is unknown and it is published again
	// (in order). Defaults to 20s.
	AckDeadline time.Duration
	// MaxAttempts is the number of failed attempts after which a row
	// becomes a dead letter. Defaults to 20.
	MaxAttempts int
	// BackoffInitial and BackoffMax bound the wait (exponential, with
	// jitter) after a retryable failure before the rows from the failed
	// one on are published again. Default to 1s and 5m.
	BackoffInitial, BackoffMax time.Duration
	// DeleteOnRelay deletes a row after its PubAck instead of marking it
	// done. Defaults to false.
	DeleteOnRelay bool
	// RowsDeletedByProducer: the producer deletes each row in the
	// transaction that inserts it (wal.rows_deleted_by_producer): the
	// table stays empty and the log carries the event, so a row missing
	// from the table is not taken for one relayed or deleted by hand.
	// Defaults to false.
	RowsDeletedByProducer bool
	// Namespace prefixes every Nats-Msg-Id (see outbox.MsgID). Defaults to "".
	Namespace string
	// DrainTimeout bounds how long Close waits for emitted messages'
	// outcomes. Defaults to 20s.
	DrainTimeout time.Duration
	// SweepInterval is how often pending rows that the slot will not
	// deliver are looked for and published. Defaults to 1m.
	SweepInterval time.Duration
	// SweepBatch is the most rows one sweep query reads. Defaults to 500.
	SweepBatch int
	// InflightTimeout: rows left in_flight longer than this by relays of
	// source: table are put back to pending by the sweep. Defaults to 30s.
	InflightTimeout time.Duration
	// StatusInterval is the longest wait between two standby status
	// updates. Defaults to 10s.
	StatusInterval time.Duration
	// HoldBack is how long the rows wait after one whose stream refused it
	// for now (class source.Held: the duplicate-window guard finds the
	// stream unsafe), before they are emitted again. Defaults to 15s.
	HoldBack time.Duration
	// Connected reports whether the NATS connection is up; while it is
	// down, rows whose publish failed wait for it instead of a backoff.
	// Defaults to nil: always up.
	Connected func() bool
	// Reconciler, when set, is asked about every row emitted again after a
	// failure whether its first publish may be stored beyond the stream's
	// duplicate window; such rows are looked up in the stream first, and
	// those found are settled as relayed without publishing. Defaults to
	// nil: rows are published again and deduplicated within the window
	// only.
	Reconciler source.Reconciler
	// SessionName is the application_name of the replication connection,
	// unless its URL (or PGAPPNAME) sets one: pg_stat_activity shows it,
	// and a standby names the relay that holds the slot by it. Defaults
	// to outbox.SessionNameDefault.
	SessionName string
}

func (c *Config) setDefaults() {
	c.MaxInFlight = cmp.Or(c.MaxInFlight, config.MaxInFlightDefault)
	c.MaxInFlightBytes = cmp.Or(c.MaxInFlightBytes, int64(config.MaxInFlightBytesDefault))
	c.AckDeadline = cmp.Or(c.AckDeadline, config.AckDeadlineDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, config.MaxAttemptsDefault)
	c.BackoffInitial = cmp.Or(c.BackoffInitial, config.BackoffInitialDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, config.BackoffMaxDefault)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, source.DrainTimeoutDefault)
	c.SweepInterval = cmp.Or(c.SweepInterval, config.WALSweepIntervalDefault)
	c.SweepBatch = cmp.Or(c.SweepBatch, config.BatchSizeDefault)
	c.InflightTimeout = cmp.Or(c.InflightTimeout, config.InflightTimeoutDefault)
	c.StatusInterval = cmp.Or(c.StatusInterval, StatusIntervalDefault)
	c.HoldBack = cmp.Or(c.HoldBack, source.HoldBackDefault)
	c.SessionName = cmp.Or(c.SessionName, outbox.SessionNameDefault)
	if c.Connected == nil {
		c.Connected = func() bool { return true }
	}
}

func (c *Config) validate() error {
	switch {
	case c.Table == "":
		return fmt.Errorf("%w: Table: must not be empty", config.ErrInvalid)
	case c.Slot == "":
		return fmt.Errorf("%w: Slot: must not be empty", config.ErrInvalid)
	case c.Publication == "":
		return fmt.Errorf("%w: Publication: must not be empty", config.ErrInvalid)
	case c.ReplicationURL == "":
		return fmt.Errorf("%w: ReplicationURL: must not be empty", config.ErrInvalid)
	case c.MaxInFlight < 1:
		return fmt.Errorf("%w: MaxInFlight: %d: must be at least 1", config.ErrInvalid, c.MaxInFlight)
	case c.MaxInFlightBytes < 1:
		return fmt.Errorf("%w: MaxInFlightBytes: %d: must be at least 1", config.ErrInvalid, c.MaxInFlightBytes)
	case c.MaxAttempts < 1:
		return fmt.Errorf("%w: MaxAttempts: %d: must be at least 1", config.ErrInvalid, c.MaxAttempts)
	case c.BackoffInitial > c.BackoffMax:
		return fmt.Errorf("%w: BackoffInitial: %s: must not exceed BackoffMax (%s)", config.ErrInvalid, c.BackoffInitial, c.BackoffMax)
	case c.SweepBatch < 1:
		return fmt.Errorf("%w: SweepBatch: %d: must be at least 1", config.ErrInvalid, c.SweepBatch)
	}
	return nil
}
