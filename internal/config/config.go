package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Defaults of the configuration, one per key of docs/CONFIGURATION.md's table.
const (
	DataDirDefault              = "./bridge-data"
	TableDefault                = "outbox"
	TablesRefreshDefault        = 30 * time.Second
	ConnMaxLifetimeDefault      = outbox.ConnMaxLifetimeDefault
	ConnMaxIdleTimeDefault      = outbox.ConnMaxIdleTimeDefault
	ConnectTimeoutDefault       = outbox.ConnectTimeoutDefault
	NATSURLDefault              = NATSURLEmbedded
	NATSListenDefault           = "127.0.0.1:4222"
	BatchSizeDefault            = 500
	MaxInFlightDefault          = 2000
	MaxInFlightBytesDefault     = 32 * MiB
	PollIntervalDefault         = 250 * time.Millisecond
	InflightTimeoutDefault      = 30 * time.Second
	AckDeadlineDefault          = 20 * time.Second
	PublishTimeoutDefault       = 5 * time.Second
	MaxAttemptsDefault          = 20
	BackoffInitialDefault       = time.Second
	BackoffMaxDefault           = 5 * time.Minute
	RetentionDefault            = 24 * time.Hour
	GuardDefault                = GuardRefuse
	ReconcileMaxMessagesDefault = 100000
	ReconcileTimeoutDefault     = 30 * time.Second
	SourceDefault               = SourceTable
	ForwarderTopicDefault       = "forwarder_topic"
	WALSlotDefault              = "outbox_bridge"
	WALPublicationDefault       = "outbox_bridge"
	WALSweepIntervalDefault     = time.Minute
	BinlogSweepIntervalDefault  = time.Minute
	HTTPListenDefault           = ":8080"
	LogLevelDefault             = "info"
	LogFormatDefault            = LogFormatAuto
	ShutdownTimeoutDefault      = 25 * time.Second
	StallAfterDefault           = time.Minute
	StallUnhealthyAfterDefault  = 5 * time.Minute

	// StreamDuplicatesDefault, StreamReplicasDefault and StreamStorageDefault fill the
	// keys a stream (from the file or from --ensure-stream) leaves out.
	StreamDuplicatesDefault = 2 * time.Minute
	// StreamReplicasDefault 0 is "auto": 3 replicas when the NATS server is one of a
	// cluster of three or more servers, 1 otherwise (see broker.EnsureStreams).
	StreamReplicasDefault = 0
	StreamStorageDefault  = StorageFile

	// EmbeddedStreamName and EmbeddedStreamSubject describe the stream created for the
	// embedded NATS server when no stream is configured (see Config.EffectiveStreams).
	EmbeddedStreamName    = "EVENTS"
	EmbeddedStreamSubject = "events.>"
)

// PublishTimeoutMargin is how much shorter than relay.ack_deadline
// relay.publish_timeout must be: a message whose PubAck does not come
// within the publish timeout is then diagnosed (the broker's outage, or
// the row's own fault) before its source gives up on it at the deadline.
// The sink ends the wait of a message handed over later than that leaves
// room for 200 ms before the deadline (sink.ErrAckDeadline): with this
// margin, only a message handed over at least 300 ms late is.
const PublishTimeoutMargin = 500 * time.Millisecond

// Allowed values of the enumerated keys.
const (
	// NATSURLEmbedded as nats.url runs an in-process NATS server with JetStream.
	NATSURLEmbedded = "embedded"

	SourceTable              = "table"               // source: the bridge table
	SourceWatermillForwarder = "watermill-forwarder" // source: watermill-sql forwarder tables
	SourcePostgresWAL        = "postgres-wal"        // source: the bridge table, read from PostgreSQL's write-ahead log
	SourceMySQLBinlog        = "mysql-binlog"        // source: the bridge table, read from the binary log of MySQL or MariaDB

	GuardRefuse = "refuse" // dedup.guard: refuse to start when the duplicate window is too short
	GuardWarn   = "warn"   // dedup.guard: log a warning and start
	GuardOff    = "off"    // dedup.guard: no check

	StorageFile   = "file"   // streams[].storage: file storage
	StorageMemory = "memory" // streams[].storage: memory storage

	LogFormatAuto = "auto" // log.format: text on a terminal, JSON otherwise
	LogFormatJSON = "json" // log.format: JSON lines
	LogFormatText = "text" // log.format: slog text
)

// Config is the whole configuration of the bridge. The koanf tags are the YAML keys; the
// environment variable of a key is BRIDGE_ followed by its path in upper snake case.
type Config struct {
	// DataDir is the directory of the embedded defaults: the SQLite outbox and the
	// JetStream store of the embedded NATS server. Defaults to ./bridge-data.
	DataDir string `koanf:"data_dir"`

	// Database is the outbox database. Defaults to SQLite in DataDir.
	Database Database `koanf:"database"`

	// NATS is the NATS connection, or the embedded server. Defaults to embedded.
	NATS NATS `koanf:"nats"`

	// Streams are the JetStream streams created when missing; see EffectiveStreams.
	// Defaults to none (EVENTS on events.> with the embedded server).
	Streams []Stream `koanf:"streams"`

	// Relay tunes claiming, publishing and row bookkeeping. Defaults to the Relay defaults.
	Relay Relay `koanf:"relay"`

	// Dedup configures Nats-Msg-Id derivation and the duplicate-window guard.
	// Defaults to the Dedup defaults.
	Dedup Dedup `koanf:"dedup"`

	// Source is what the relay reads: "table" (the bridge table, claimed row by row),
	// "postgres-wal" (the bridge table on PostgreSQL, read from the write-ahead log through
	// logical replication) or "watermill-forwarder" (watermill-sql forwarder tables).
	// Defaults to table.
	Source string `koanf:"source"`

	// Watermill configures the watermill-forwarder source. Defaults to the Watermill defaults.
	Watermill Watermill `koanf:"watermill"`

	// WAL configures the postgres-wal source. Defaults to the WAL defaults.
	WAL WAL `koanf:"wal"`

	// Binlog configures the mysql-binlog source. Defaults to the Binlog defaults.
	Binlog Binlog `koanf:"binlog"`

	// HTTP is the health and metrics server. Defaults to :8080.
	HTTP HTTP `koanf:"http"`

	// UI is the web console at /ui/ on http.listen. Defaults to off.
	UI UI `koanf:"ui"`

	// Log configures the slog logger. Defaults to info, auto.
	Log Log `koanf:"log"`

	// ShutdownTimeout is how long the relay drains after SIGTERM before it stops hard.
	// Defaults to 25s.
	ShutdownTimeout time.Duration `koanf:"shutdown_timeout"`
}

// Database is the outbox database.
type Database struct {
	// URL is the database: postgres://…, postgresql://…, mysql://… or sqlite:PATH.
	// Empty means the embedded SQLite database sqlite:<data_dir>/outbox.db, which the relay
	// migrates itself. Defaults to empty.
	URL string `koanf:"url"`

	// Table is the outbox table, an SQL identifier optionally qualified by a schema
	// ("app.outbox"). Defaults to outbox.
	Table string `koanf:"table"`

	// Tables are several outbox tables, or patterns of them with * in the schema or
	// the table part ('tenant_*.outbox', 'app.*_outbox'), in place of table; in the
	// environment comma-separated. A pattern matches the bridge tables (those bridge
	// migrate made) that exist; one matching nothing is a warning, a name that does not
	// exist an error. bridge run (source: table), status, retry, requeue, purge and
	// migrate act on every table matched; enqueue, replay, slot and the other sources work
	// on one table and refuse them (docs/DESIGN.md, Many tables). Defaults to none.
	Tables []string `koanf:"tables"`

	// TablesRefresh is how often bridge run resolves the patterns of tables again: a
	// table created since (a new tenant's schema) is relayed from then on, one dropped
	// is let go. Defaults to 30s.
	TablesRefresh time.Duration `koanf:"tables_refresh"`

	// ConnMaxLifetime is the age after which a PostgreSQL or MySQL session is closed
	// instead of being reused, so that none stays on a server that was demoted or moved
	// away from. Defaults to 3m.
	ConnMaxLifetime time.Duration `koanf:"conn_max_lifetime"`

	// ConnMaxIdleTime is how long an unused PostgreSQL or MySQL session is kept open.
	// Defaults to 1m.
	ConnMaxIdleTime time.Duration `koanf:"conn_max_idle_time"`

	// ConnectTimeout bounds opening a PostgreSQL or MySQL session (connection,
	// TLS, authentication) and the first query that checks the database: a
	// server that accepts TCP connections but never answers is retried instead
	// of waited for. Defaults to 10s.
	ConnectTimeout time.Duration `koanf:"connect_timeout"`
}

// NATS is the connection to NATS, or the embedded server.
type NATS struct {
	// URL is "embedded" (an in-process server with JetStream storing in
	// <data_dir>/jetstream) or a comma-separated list of nats://, tls://, ws:// or wss://
	// URLs of one cluster. Defaults to embedded.
	URL string `koanf:"url"`

	// Listen is the client address host:port of the embedded server. Defaults to
	// 127.0.0.1:4222.
	Listen string `koanf:"listen"`

	// CredsFile is a user credentials file (JWT and NKey seed). Defaults to empty (none).
	CredsFile string `koanf:"creds_file"`

	// NkeySeedFile is a file holding an NKey user seed. Defaults to empty (none).
	NkeySeedFile string `koanf:"nkey_seed_file"`

	// User is the user name of user/password authentication. Defaults to empty (none).
	User string `koanf:"user"`

	// Password is the password of User; a secret. Defaults to empty (none).
	Password string `koanf:"password"`

	// Token is an authentication token; a secret. Defaults to empty (none).
	Token string `koanf:"token"`

	// TLS holds the CA and client certificate files. Defaults to empty (system roots, no
	// client certificate).
	TLS TLS `koanf:"tls"`
}

// TLS holds PEM files for TLS and mutual TLS with NATS.
type TLS struct {
	// CAFile is the CA bundle that verifies the server. Defaults to empty (system roots).
	CAFile string `koanf:"ca_file"`

	// CertFile is the client certificate, with KeyFile. Defaults to empty (none).
	CertFile string `koanf:"cert_file"`

	// KeyFile is the client certificate's private key, with CertFile. Defaults to empty (none).
	KeyFile string `koanf:"key_file"`
}

// Stream is a JetStream stream created when missing.
type Stream struct {
	// Name is the stream name: no spaces, '.', '*', '>' or path separators. Required; no
	// default.
	Name string `koanf:"name"`

	// Subjects are the subjects the stream captures (wildcards allowed), at least one.
	// Required; no default.
	Subjects []string `koanf:"subjects"`

	// Duplicates is the stream's duplicate window, in which a repeated Nats-Msg-Id is
	// dropped; at least 100ms. Defaults to 2m.
	Duplicates time.Duration `koanf:"duplicates"`

	// Replicas is the number of stream replicas, 1 to 5, or 0 for "auto": 3 on a
	// cluster of three or more servers, 1 on a single server (found when the relay
	// connects). Defaults to 0 (auto).
	Replicas int `koanf:"replicas"`

	// Storage is "file" or "memory". Defaults to file.
	Storage string `koanf:"storage"`

	// MaxAge is how long the stream keeps a message; 0 means no limit. Defaults to 0 (no
	// limit).
	MaxAge time.Duration `koanf:"max_age"`
}

// Relay tunes the relay loop.
type Relay struct {
	// BatchSize is the number of rows claimed at once, 1 to 100000. Defaults to 500 rows.
	BatchSize int `koanf:"batch_size"`

	// MaxInFlight is the number of publishes awaiting a PubAck at once, 1 to 1000000.
	// Defaults to 2000 messages.
	MaxInFlight int `koanf:"max_in_flight"`

	// MaxInFlightBytes bounds what the rows claimed and not yet settled hold in memory:
	// their payloads and headers. A claim stops before the row that would pass it, but
	// takes at least one row while the bound is not reached, so one row (at most the NATS
	// server's max_payload) may pass it. Defaults to 32MiB.
	MaxInFlightBytes ByteSize `koanf:"max_in_flight_bytes"`

	// PollInterval is the idle wait between empty claims (a notification wakes earlier).
	// Defaults to 250ms.
	PollInterval time.Duration `koanf:"poll_interval"`

	// InflightTimeout is the lease length; in_flight rows older than it are requeued.
	// Must be longer than AckDeadline. Defaults to 30s.
	InflightTimeout time.Duration `koanf:"inflight_timeout"`

	// AckDeadline is the in-process settle deadline of one message. Must be at least
	// PublishTimeoutMargin longer than PublishTimeout and shorter than
	// InflightTimeout. Defaults to 20s.
	AckDeadline time.Duration `koanf:"ack_deadline"`

	// PublishTimeout is the wait for one PubAck. Must be at least
	// PublishTimeoutMargin shorter than AckDeadline. Defaults to 5s.
	PublishTimeout time.Duration `koanf:"publish_timeout"`

	// MaxAttempts is the number of publish attempts before a row becomes
	// permanent_failed, at least 1. Defaults to 20 attempts.
	MaxAttempts int `koanf:"max_attempts"`

	// BackoffInitial is the first retry delay; delays grow exponentially with jitter.
	// Must not exceed BackoffMax. Defaults to 1s.
	BackoffInitial time.Duration `koanf:"backoff_initial"`

	// BackoffMax caps the retry delay. Defaults to 5m.
	BackoffMax time.Duration `koanf:"backoff_max"`

	// Retention is how long done rows are kept before deletion. Defaults to 24h.
	Retention time.Duration `koanf:"retention"`

	// DeleteOnRelay deletes a row at its PubAck instead of marking it done. Defaults to
	// false.
	DeleteOnRelay bool `koanf:"delete_on_relay"`

	// Owner is this instance's lease owner name, unique per replica. Defaults
	// (also when set to "") to <hostname>-<pid>.
	Owner string `koanf:"owner"`

	// StallAfter is how long a row may stay claimable (pending or failed, its backoff
	// over, no earlier row of its ordering key unsettled) while the relay claims nothing
	// before the relay counts as stalled: logged, bridge_relay_stalled_seconds. Rows in a
	// backoff and an empty table never count. At least 1s. Defaults to 1m.
	StallAfter time.Duration `koanf:"stall_after"`

	// StallUnhealthyAfter is how long the relay may stay stalled before /healthz fails,
	// so that an orchestrator restarts it; 0 means never. Defaults to 5m.
	StallUnhealthyAfter time.Duration `koanf:"stall_unhealthy_after"`
}

// Dedup configures message ids and the duplicate-window guard.
type Dedup struct {
	// Namespace prefixes every Nats-Msg-Id as "<namespace>/": at most 64 visible ASCII
	// characters, in which {schema} and {table} stand for the schema and the
	// (schema-qualified) name of the row's outbox table: '{schema}' gives each tenant of
	// a relay over many tables ids of its own (NamespaceFor). Defaults to empty (no
	// prefix).
	Namespace string `koanf:"namespace"`

	// Guard is the duplicate-window check at start: "refuse", "warn" or "off".
	// Defaults to refuse.
	Guard string `koanf:"guard"`

	// ReconcileMaxMessages bounds the stream scan that settles in-doubt rows, at least 1.
	// Defaults to 100000 messages.
	ReconcileMaxMessages int `koanf:"reconcile_max_messages"`

	// ReconcileTimeout bounds the duration of that scan. Defaults to 30s.
	ReconcileTimeout time.Duration `koanf:"reconcile_timeout"`
}

// Watermill configures the watermill-forwarder source.
type Watermill struct {
	// ForwarderTopic is the watermill-sql topic the forwarder publisher writes (table
	// watermill_<topic>): letters, digits and - $ : . _ as watermill-sql allows.
	// Defaults to forwarder_topic.
	ForwarderTopic string `koanf:"forwarder_topic"`

	// MsgIDMetadata is the metadata key holding the idempotency key; empty means the
	// Watermill message UUID. Defaults to empty.
	MsgIDMetadata string `koanf:"msg_id_metadata"`
}

// WAL configures the postgres-wal source: a publication of the outbox table's inserts and a
// logical replication slot (pgoutput), created by `bridge migrate`.
type WAL struct {
	// ReplicationURL is the postgres:// URL of the replication connection, for when
	// database.url points at a transaction pooler (PgBouncer), which cannot carry one;
	// empty means database.url. A secret (it may hold a password). Defaults to empty.
	ReplicationURL string `koanf:"replication_url"`

	// Slot is the logical replication slot: lowercase letters, digits and _, at most 63
	// bytes, unique in the server (one per outbox table). Defaults to outbox_bridge.
	Slot string `koanf:"slot"`

	// Publication is the publication of the outbox table's inserts: lowercase letters,
	// digits and _, at most 63 bytes. Defaults to outbox_bridge.
	Publication string `koanf:"publication"`

	// SweepInterval is how often the relay looks for pending rows that the slot will not
	// deliver (written before the slot existed, put back by `bridge retry`, left by a lost
	// slot) and publishes them. Defaults to 1m.
	SweepInterval time.Duration `koanf:"sweep_interval"`

	// RowsDeletedByProducer is the insert-then-delete mode: the producer deletes each
	// outbox row in the transaction that inserts it, so that the table stays empty and
	// the write-ahead log carries the event. The relay then takes a row missing from the
	// table for one still to relay, not for one relayed or deleted by hand; no mark is
	// written (there is no row), and the sweep, `bridge status` and the stall watch see
	// nothing of it. Only with source postgres-wal. Defaults to false.
	RowsDeletedByProducer bool `koanf:"rows_deleted_by_producer"`
}

// Binlog configures the mysql-binlog source: the outbox table's inserts read from the
// binary log of MySQL or MariaDB, as a replica of the server.
type Binlog struct {
	// ServerID is the server_id the relay's replication connection registers with: unique
	// among the server's replicas and every other reader of its binary log (a second
	// connection with the same id ends the first). 0 derives one from the table's name
	// (in 1,000,000,000–1,999,999,999). Defaults to 0.
	ServerID int64 `koanf:"server_id"`

	// SweepInterval is how often the relay looks for pending rows that the binary log will
	// not bring (written before the relay's first position, put back by `bridge retry`,
	// committed while a purged position was lost) and publishes them. Defaults to 1m.
	SweepInterval time.Duration `koanf:"sweep_interval"`
}

// ReplicationURLOrDefault returns ReplicationURL, or DatabaseURL when it is empty.
func (c *Config) ReplicationURLOrDefault() string {
	if c.WAL.ReplicationURL != "" {
		return c.WAL.ReplicationURL
	}
	return c.DatabaseURL()
}

// HTTP is the health and metrics server.
type HTTP struct {
	// Listen is the address host:port of /healthz, /readyz and /metrics; the host may be
	// empty (all interfaces). Defaults to :8080.
	Listen string `koanf:"listen"`
}

// UI configures the web console (internal/console), served at /ui/ on http.listen.
type UI struct {
	// Enabled serves the console. Defaults to false.
	Enabled bool `koanf:"enabled"`

	// Token is the bearer token that allows the console's actions (retry, requeue, purge)
	// and, unless ReadOnlyWithoutToken, reading it; a secret, at least 16 bytes. Defaults to
	// empty (no actions).
	Token string `koanf:"token"`

	// ReadOnlyWithoutToken lets anyone who reaches http.listen read the console without the
	// token; actions still need it. Defaults to false.
	ReadOnlyWithoutToken bool `koanf:"read_only_without_token"`
}

// UITokenMinBytes is the shortest ui.token accepted.
const UITokenMinBytes = 16

// Log configures logging.
type Log struct {
	// Level is "debug", "info", "warn" or "error". Defaults to info.
	Level string `koanf:"level"`

	// Format is "auto" (text on a terminal, JSON otherwise), "json" or "text".
	// Defaults to auto.
	Format string `koanf:"format"`
}

// Default returns the configuration used when nothing is set: every default of the
// docs/CONFIGURATION.md's table. Streams is empty (EffectiveStreams supplies the embedded
// default) and Relay.Owner is <hostname>-<pid>.
func Default() Config {
	return Config{
		DataDir: DataDirDefault,
		Database: Database{Table: TableDefault, TablesRefresh: TablesRefreshDefault, ConnMaxLifetime: ConnMaxLifetimeDefault, ConnMaxIdleTime: ConnMaxIdleTimeDefault,
			ConnectTimeout: ConnectTimeoutDefault},
		NATS: NATS{URL: NATSURLDefault, Listen: NATSListenDefault},
		Relay: Relay{
			BatchSize:        BatchSizeDefault,
			MaxInFlight:      MaxInFlightDefault,
			MaxInFlightBytes: MaxInFlightBytesDefault,
			PollInterval:     PollIntervalDefault,
			InflightTimeout:  InflightTimeoutDefault,
			AckDeadline:      AckDeadlineDefault,
			PublishTimeout:   PublishTimeoutDefault,
			MaxAttempts:      MaxAttemptsDefault,
			BackoffInitial:   BackoffInitialDefault,
			BackoffMax:       BackoffMaxDefault,
			Retention:        RetentionDefault,
			Owner:            defaultOwner(),

			StallAfter:          StallAfterDefault,
			StallUnhealthyAfter: StallUnhealthyAfterDefault,
		},
		Dedup: Dedup{
			Guard:                GuardDefault,
			ReconcileMaxMessages: ReconcileMaxMessagesDefault,
			ReconcileTimeout:     ReconcileTimeoutDefault,
		},
		Source:          SourceDefault,
		Watermill:       Watermill{ForwarderTopic: ForwarderTopicDefault},
		WAL:             WAL{Slot: WALSlotDefault, Publication: WALPublicationDefault, SweepInterval: WALSweepIntervalDefault},
		Binlog:          Binlog{SweepInterval: BinlogSweepIntervalDefault},
		HTTP:            HTTP{Listen: HTTPListenDefault},
		Log:             Log{Level: LogLevelDefault, Format: LogFormatDefault},
		ShutdownTimeout: ShutdownTimeoutDefault,
	}
}

// DefaultOwner reports whether owner is this process's default owner name.
func DefaultOwner(owner string) bool { return owner == defaultOwner() }

// defaultOwner is <hostname>-<pid>, or bridge-<pid> when the host name is unknown.
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "bridge"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// DatabaseURL returns Database.URL, or "sqlite:<data_dir>/outbox.db" when it is empty.
func (c *Config) DatabaseURL() string {
	if c.Database.URL != "" {
		return c.Database.URL
	}
	return outbox.SQLiteURL(filepath.Join(c.DataDir, "outbox.db"))
}

// TableNames are the outbox tables configured: database.tables, or
// database.table alone. An item may be a pattern (outbox.IsTablePattern),
// which outbox.DB.MatchTables resolves.
func (c *Config) TableNames() []string {
	if len(c.Database.Tables) > 0 {
		return c.Database.Tables
	}
	return []string{c.Database.Table}
}

// normalizeTables makes database.tables of one name, not a pattern, that
// name as database.table: the configuration of one table reads the same
// however it was given. Both keys set (table to other than its default) is
// an error naming both.
func (c *Config) normalizeTables() error {
	if len(c.Database.Tables) == 0 {
		c.Database.Tables = nil
		return nil
	}
	if c.Database.Table != TableDefault {
		return &Error{Key: "database.tables", Value: strings.Join(c.Database.Tables, ","),
			Allowed: fmt.Sprintf("must not be set with database.table (%s): give the tables in one of them", c.Database.Table)}
	}
	if only := c.Database.Tables; len(only) == 1 && only[0] != "" && !outbox.IsTablePattern(only[0]) {
		c.Database.Table, c.Database.Tables = c.Database.Tables[0], nil
	}
	return nil
}

// DatabaseDialect is the dialect of DatabaseURL's scheme (outbox.SchemeOf),
// or "" for a URL of no driver.
func (c *Config) DatabaseDialect() outbox.Dialect {
	_, d, _ := outbox.SchemeOf(c.DatabaseURL())
	return d
}

// EmbeddedDatabase reports whether the outbox is the embedded default SQLite database
// <data_dir>/outbox.db: Database.URL is empty, or a sqlite: URL of that very file (as
// `bridge config` prints it, so that its output read back means the same). The relay
// migrates the schema itself only then.
func (c *Config) EmbeddedDatabase() bool {
	if c.Database.URL == "" {
		return true
	}
	path := c.SQLitePath()
	return path != "" && filepath.Clean(path) == filepath.Join(c.DataDir, "outbox.db")
}

// SQLitePath is the path of the SQLite outbox (DatabaseURL without "sqlite:" and a
// leading "//"), or "" when the outbox is not SQLite.
func (c *Config) SQLitePath() string {
	path, _ := outbox.SQLitePath(c.DatabaseURL())
	return path
}

// EmbeddedNATS reports whether NATS.URL is "embedded": the bridge runs its own NATS server.
func (c *Config) EmbeddedNATS() bool {
	return c.NATS.URL == NATSURLEmbedded
}

// JetStreamDir returns the store directory of the embedded NATS server, <data_dir>/jetstream.
func (c *Config) JetStreamDir() string {
	return filepath.Join(c.DataDir, "jetstream")
}

// EffectiveStreams returns the streams to create when missing: Streams, or when none is
// configured and NATS is embedded, EVENTS on events.> with the stream defaults. The result
// is a copy.
func (c *Config) EffectiveStreams() []Stream {
	if len(c.Streams) > 0 {
		out := slices.Clone(c.Streams)
		for i := range out {
			out[i].Subjects = slices.Clone(out[i].Subjects)
		}
		return out
	}
	if !c.EmbeddedNATS() {
		return nil
	}
	return []Stream{{
		Name:       EmbeddedStreamName,
		Subjects:   []string{EmbeddedStreamSubject},
		Duplicates: StreamDuplicatesDefault,
		Replicas:   StreamReplicasDefault,
		Storage:    StreamStorageDefault,
	}}
}

// DatabaseSession is the outbox.Session of the configuration: named after the
// relay owner (relay.owner, by default <hostname>-<pid>) and bounded by
// database.conn_max_lifetime and database.conn_max_idle_time, opened within
// database.connect_timeout.
func (c *Config) DatabaseSession() outbox.Session {
	return outbox.Session{
		Name:           outbox.SessionName(c.Relay.Owner),
		MaxLifetime:    c.Database.ConnMaxLifetime,
		MaxIdleTime:    c.Database.ConnMaxIdleTime,
		ConnectTimeout: c.Database.ConnectTimeout,
	}
}

// NamespaceFor is dedup.namespace for the rows of table (as the relay names it,
// "schema.name" or "name"): {schema} replaced by its schema part (empty when the
// name has none) and {table} by the name as given.
func (c *Config) NamespaceFor(table string) string {
	ns := c.Dedup.Namespace
	if !strings.Contains(ns, "{") {
		return ns
	}
	schema, _, qualified := strings.Cut(table, ".")
	if !qualified {
		schema = ""
	}
	return strings.NewReplacer(NamespaceSchema, schema, NamespaceTable, table).Replace(ns)
}

// The placeholders of dedup.namespace (NamespaceFor).
const (
	NamespaceSchema = "{schema}"
	NamespaceTable  = "{table}"
)

// NamespacePerTable reports whether dedup.namespace gives each table ids of its
// own ({schema} or {table} in it).
func (c *Config) NamespacePerTable() bool {
	return strings.Contains(c.Dedup.Namespace, NamespaceSchema) || strings.Contains(c.Dedup.Namespace, NamespaceTable)
}
