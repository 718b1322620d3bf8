package mysqlbinlog

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/source"
)

// Config configures a Subscriber.
type Config struct {
	// Table is the bridge table, as configured (schema-qualified or not).
	// Required.
	Table string
	// URL is the mysql:// URL of the replication connection
	// (database.url). Required.
	URL string
	// ServerID is the server_id the replication connection registers
	// with; 0 derives one from the table's database and name
	// (DeriveServerID).
	ServerID uint32
	// MaxInFlight bounds the rows of one batch: read from the log, or by
	// the sweep, and published together. Defaults to 2000 rows.
	MaxInFlight int
	// MaxInFlightBytes bounds the bytes (payloads and headers) of one
	// batch; a row always fits an empty batch. Defaults to 32 MiB.
	MaxInFlightBytes int64
	// MaxPayload, when set, returns the NATS server's max_payload in bytes
	// (nats.Conn.MaxPayload), or 0 when unknown: a longer payload makes a
	// dead letter. Defaults to nil.
	MaxPayload func() int64
	// AckDeadline is how long an emitted message may stay neither acked
	// nor nacked before its outcome counts as unknown. Defaults to 20s.
	AckDeadline time.Duration
	// MaxAttempts is the number of failed attempts after which a row
	// becomes a dead letter. Defaults to 20.
	MaxAttempts int
	// BackoffInitial and BackoffMax bound the wait after a retryable
	// failure (exponential, with jitter). Default to 1s and 5m.
	BackoffInitial, BackoffMax time.Duration
	// HoldBack is how long rows wait after their stream refused them for
	// now (source.Held). Defaults to 15s.
	HoldBack time.Duration
	// DeleteOnRelay deletes a row after its PubAck instead of marking it
	// done. Defaults to false.
	DeleteOnRelay bool
	// Namespace prefixes every Nats-Msg-Id (outbox.MsgID). Defaults to "".
	Namespace string
	// DrainTimeout bounds how long Close waits for emitted messages'
	// outcomes. Defaults to 20s.
	DrainTimeout time.Duration
	// SweepInterval is how often the sweep runs. Defaults to 1m.
	SweepInterval time.Duration
	// SweepBatch is the most rows one sweep read takes. Defaults to 500.
	SweepBatch int
	// InflightTimeout: rows a source: table relay left in_flight longer
	// than this are put back to pending by the sweep. Defaults to 30s.
	InflightTimeout time.Duration
	// Connected reports whether the NATS connection is up; while it is
	// down, failed rows wait for it instead of a backoff. Defaults to nil:
	// always up.
	Connected func() bool
	// Owner names this relay in the lock's holder (relay.owner).
	Owner string
	// Reconciler, when set, is asked about the rows read again after a
	// restart that the previous run may have published (those up to four
	// batches past the stored position) whether that publish may have
	// left the stream's duplicate window; such rows are looked up in the
	// stream first, and those found are marked relayed without a publish.
	// Defaults to nil: they are published again, deduplicated within the
	// window only.
	Reconciler source.Reconciler
}

func (c *Config) setDefaults() {
	c.MaxInFlight = cmp.Or(c.MaxInFlight, config.MaxInFlightDefault)
	c.MaxInFlightBytes = cmp.Or(c.MaxInFlightBytes, int64(config.MaxInFlightBytesDefault))
	c.AckDeadline = cmp.Or(c.AckDeadline, config.AckDeadlineDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, config.MaxAttemptsDefault)
	c.BackoffInitial = cmp.Or(c.BackoffInitial, config.BackoffInitialDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, config.BackoffMaxDefault)
	c.HoldBack = cmp.Or(c.HoldBack, source.HoldBackDefault)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, source.DrainTimeoutDefault)
	c.SweepInterval = cmp.Or(c.SweepInterval, config.BinlogSweepIntervalDefault)
	c.SweepBatch = cmp.Or(c.SweepBatch, config.BatchSizeDefault)
	c.InflightTimeout = cmp.Or(c.InflightTimeout, config.InflightTimeoutDefault)
	if c.Connected == nil {
		c.Connected = func() bool { return true }
	}
}

func (c *Config) validate() error {
	switch {
	case c.Table == "":
		return fmt.Errorf("%w: Table: must not be empty", config.ErrInvalid)
	case c.URL == "":
		return fmt.Errorf("%w: URL: must not be empty", config.ErrInvalid)
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

// DeriveServerID is the server_id of the relay of table (database.table, as
// the server names it) when binlog.server_id is 0: 1,000,000,000 plus the
// name's FNV-1a hash modulo
// 1,000,000,000, so that relays of different tables do not share one (a
// server ends a replica's connection when another registers with its
// server_id) and it stays clear of the small ids servers are usually
// given.
func DeriveServerID(table string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(table))
	return 1_000_000_000 + h.Sum32()%1_000_000_000
}
