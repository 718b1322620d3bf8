package mysqlbinlog

import (
	"fmt"
	"hash/fnv"

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
	// LogDelivery is how rows are held, published, retried and settled;
	// its SweepInterval defaults to 1m (binlog.sweep_interval).
	source.LogDelivery
	// Owner names this relay in the lock's holder (relay.owner).
	Owner string
}

func (c *Config) setDefaults() {
	c.LogDelivery.SetDefaults(config.BinlogSweepIntervalDefault)
}

func (c *Config) validate() error {
	switch {
	case c.Table == "":
		return fmt.Errorf("%w: Table: must not be empty", config.ErrInvalid)
	case c.URL == "":
		return fmt.Errorf("%w: URL: must not be empty", config.ErrInvalid)
	}
	return c.LogDelivery.Validate()
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
