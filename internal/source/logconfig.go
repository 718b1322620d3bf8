package source

import (
	"cmp"
	"fmt"
	"time"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// LogDelivery is what the log sources (postgres-wal, mysql-binlog) share of
// their configuration: how the rows read from the log, or by their sweep,
// are held, published, retried and settled. Each source's Config embeds it.
type LogDelivery struct {
	// MaxInFlight bounds the rows read (from the log, or by the sweep) and
	// not yet settled (published and marked, or dead-lettered): reading
	// pauses at the bound (mysql-binlog: the rows of one batch, published
	// together). Defaults to 2000 rows.
	MaxInFlight int
	// MaxInFlightBytes bounds the bytes (payloads and headers) of those
	// rows held in memory; one row always fits when nothing is held.
	// Defaults to 32 MiB.
	MaxInFlightBytes int64
	// MaxPayload, when set, returns the NATS server's max_payload in bytes
	// (nats.Conn.MaxPayload), or 0 when unknown. A row whose payload
	// cannot fit it with the message's headers becomes a dead letter from
	// its length. Defaults to nil: the publish refuses such a row (a dead
	// letter too).
	MaxPayload func() int64
	// AckDeadline is how long an emitted message may stay neither acked
	// nor nacked; then its outcome is unknown and it is published again
	// (in order). Defaults to 20s.
	AckDeadline time.Duration
	// MaxAttempts is the number of failed attempts after which a row
	// becomes a dead letter. Defaults to 20.
	MaxAttempts int
	// BackoffInitial and BackoffMax bound the wait (exponential, with
	// jitter, see Backoff) after a retryable failure. Default to 1s and 5m.
	BackoffInitial, BackoffMax time.Duration
	// HoldBack is how long rows wait after their stream refused them for
	// now (class Held: the duplicate-window guard finds the stream
	// unsafe). Defaults to 15s.
	HoldBack time.Duration
	// DeleteOnRelay deletes a row after its PubAck instead of marking it
	// done. Defaults to false.
	DeleteOnRelay bool
	// Namespace prefixes every Nats-Msg-Id (outbox.MsgID). Defaults to "".
	Namespace string
	// DrainTimeout bounds how long Close waits for emitted messages'
	// outcomes. Defaults to 20s.
	DrainTimeout time.Duration
	// SweepInterval is how often pending rows that the log will not bring
	// are looked for and published. Defaults to the source's own default
	// (SetDefaults).
	SweepInterval time.Duration
	// SweepBatch is the most rows one sweep read takes. Defaults to 500.
	SweepBatch int
	// InflightTimeout: rows left in_flight longer than this by relays of
	// source: table are put back to pending by the sweep. Defaults to 30s.
	InflightTimeout time.Duration
	// Connected reports whether the NATS connection is up; while it is
	// down, rows whose publish failed wait for it instead of a backoff.
	// Defaults to nil: always up.
	Connected func() bool
	// Reconciler, when set, is asked about rows published again after a
	// failure or a restart whether their first publish may be stored beyond
	// the stream's duplicate window; such rows are looked up in the stream
	// first, and those found are settled as relayed without a publish.
	// Defaults to nil: they are published again, deduplicated within the
	// window only.
	Reconciler Reconciler
}

// LogDeliveryOf is the LogDelivery of a relay of table under cfg (the
// relay.* keys, the table's dedup namespace, shutdown_timeout), sweeping
// every sweepInterval; maxPayload and connected are the NATS connection's
// (nats.Conn.MaxPayload, IsConnected).
func LogDeliveryOf(cfg *config.Config, table string, sweepInterval time.Duration, maxPayload func() int64, connected func() bool, reconciler Reconciler) LogDelivery {
	r := cfg.Relay
	return LogDelivery{
		MaxInFlight:      r.MaxInFlight,
		MaxInFlightBytes: int64(r.MaxInFlightBytes),
		MaxPayload:       maxPayload,
		AckDeadline:      r.AckDeadline,
		MaxAttempts:      r.MaxAttempts,
		BackoffInitial:   r.BackoffInitial,
		BackoffMax:       r.BackoffMax,
		DeleteOnRelay:    r.DeleteOnRelay,
		Namespace:        cfg.NamespaceFor(table),
		// The router stops within shutdown_timeout: 3 s of it are left
		// for that.
		DrainTimeout:    max(cfg.ShutdownTimeout-3*time.Second, cfg.ShutdownTimeout/2),
		SweepInterval:   sweepInterval,
		SweepBatch:      r.BatchSize,
		InflightTimeout: r.InflightTimeout,
		Connected:       connected,
		Reconciler:      reconciler,
	}
}

// SetDefaults gives every zero field its default; sweepInterval is the
// source's default sweep interval.
func (d *LogDelivery) SetDefaults(sweepInterval time.Duration) {
	d.MaxInFlight = cmp.Or(d.MaxInFlight, config.MaxInFlightDefault)
	d.MaxInFlightBytes = cmp.Or(d.MaxInFlightBytes, int64(config.MaxInFlightBytesDefault))
	d.AckDeadline = cmp.Or(d.AckDeadline, config.AckDeadlineDefault)
	d.MaxAttempts = cmp.Or(d.MaxAttempts, config.MaxAttemptsDefault)
	d.BackoffInitial = cmp.Or(d.BackoffInitial, config.BackoffInitialDefault)
	d.BackoffMax = cmp.Or(d.BackoffMax, config.BackoffMaxDefault)
	d.HoldBack = cmp.Or(d.HoldBack, HoldBackDefault)
	d.DrainTimeout = cmp.Or(d.DrainTimeout, DrainTimeoutDefault)
	d.SweepInterval = cmp.Or(d.SweepInterval, sweepInterval)
	d.SweepBatch = cmp.Or(d.SweepBatch, config.BatchSizeDefault)
	d.InflightTimeout = cmp.Or(d.InflightTimeout, config.InflightTimeoutDefault)
	if d.Connected == nil {
		d.Connected = func() bool { return true }
	}
}

// Validate checks the bounds (after SetDefaults). Errors: config.ErrInvalid
// naming the field.
func (d *LogDelivery) Validate() error {
	switch {
	case d.MaxInFlight < 1:
		return fmt.Errorf("%w: MaxInFlight: %d: must be at least 1", config.ErrInvalid, d.MaxInFlight)
	case d.MaxInFlightBytes < 1:
		return fmt.Errorf("%w: MaxInFlightBytes: %d: must be at least 1", config.ErrInvalid, d.MaxInFlightBytes)
	case d.MaxAttempts < 1:
		return fmt.Errorf("%w: MaxAttempts: %d: must be at least 1", config.ErrInvalid, d.MaxAttempts)
	case d.BackoffInitial > d.BackoffMax:
		return fmt.Errorf("%w: BackoffInitial: %s: must not exceed BackoffMax (%s)", config.ErrInvalid, d.BackoffInitial, d.BackoffMax)
	case d.SweepBatch < 1:
		return fmt.Errorf("%w: SweepBatch: %d: must be at least 1", config.ErrInvalid, d.SweepBatch)
	}
	return nil
}

// PayloadLimit is the longest payload a row may have, in bytes: longer,
// it can never be published (outbox.PayloadMaxBytes of MaxPayload); 0 when
// unknown.
func (d *LogDelivery) PayloadLimit() int64 {
	if d.MaxPayload == nil {
		return 0
	}
	return outbox.PayloadMaxBytes(d.MaxPayload())
}
