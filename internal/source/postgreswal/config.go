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
	// LogDelivery is how rows are held, published, retried and settled;
	// its SweepInterval defaults to 1m (wal.sweep_interval).
	source.LogDelivery
	// RowsDeletedByProducer: the producer deletes each row in the
	// transaction that inserts it (wal.rows_deleted_by_producer): the
	// table stays empty and the log carries the event, so a row missing
	// from the table is not taken for one relayed or deleted by hand.
	// Defaults to false.
	RowsDeletedByProducer bool
	// StatusInterval is the longest wait between two standby status
	// updates. Defaults to 10s.
	StatusInterval time.Duration
	// SessionName is the application_name of the replication connection,
	// unless its URL (or PGAPPNAME) sets one: pg_stat_activity shows it,
	// and a standby names the relay that holds the slot by it. Defaults
	// to outbox.SessionNameDefault.
	SessionName string
}

func (c *Config) setDefaults() {
	c.LogDelivery.SetDefaults(config.WALSweepIntervalDefault)
	c.StatusInterval = cmp.Or(c.StatusInterval, StatusIntervalDefault)
	c.SessionName = cmp.Or(c.SessionName, outbox.SessionNameDefault)
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
	}
	return c.LogDelivery.Validate()
}
