package producer

import (
	"errors"
	"fmt"

	"github.com/outbox-bridge/bridge/producer/internal/sqlname"
)

// Defaults of Config.
const (
	// TableDefault is the outbox table of a zero Config.Table, the same
	// default as the relay's database.table.
	TableDefault = "outbox"
	// DialectDefault is the database of a zero Config.Dialect.
	DialectDefault = Postgres
)

// Config configures a Writer.
type Config struct {
	// Table is the outbox table, optionally schema-qualified as
	// "schema.table" (on MySQL the qualifier is a database). It is written
	// into SQL unquoted, so it follows the database's case folding, and must
	// be the table the relay reads (its database.table). Defaults to
	// "outbox" (TableDefault).
	Table string
	// Dialect is the database the rows are written to: Postgres, MySQL
	// (also MariaDB) or SQLite. It decides the placeholders, how an existing
	// idempotency key is detected and the key length limits. Defaults to
	// Postgres (DialectDefault).
	Dialect Dialect
	// MaxPayload is the max_payload of the NATS server the relay publishes
	// to, in bytes (nats.Conn.MaxPayload; nats-server's default is 1 MiB).
	// When set, Write refuses an event whose payload cannot fit it with
	// the headers of its message (its own and at least those the relay
	// adds): the relay would make its row a dead letter. Defaults to 0:
	// not checked.
	MaxPayload int64
}

// ErrInvalidConfig is wrapped by the errors of New for a bad Config (the
// name the consumer module gives the same error).
var ErrInvalidConfig = errors.New("invalid config")

// Writer writes outbox rows in its caller's transactions. It holds no
// connection and is safe for concurrent use; build one with New and share it.
type Writer struct {
	table      string
	dialect    Dialect
	impl       dialect
	insert     string
	maxPayload int64
}

// New returns a Writer for cfg. Zero fields take their defaults
// (TableDefault, DialectDefault).
//
// It fails with an error wrapping ErrInvalidConfig: "invalid config: Table:
// …" when the table is not an SQL identifier optionally qualified as
// schema.table, "invalid config: Dialect: …" for a dialect other than
// Postgres, MySQL and SQLite, "invalid config: MaxPayload: …" for a
// negative MaxPayload.
func New(cfg Config) (*Writer, error) {
	if cfg.Table == "" {
		cfg.Table = TableDefault
	}
	if cfg.Dialect == "" {
		cfg.Dialect = DialectDefault
	}
	if err := sqlname.Check(cfg.Table); err != nil {
		return nil, fmt.Errorf("%w: Table: %w", ErrInvalidConfig, err)
	}
	impl, ok := dialects[cfg.Dialect]
	if !ok {
		return nil, fmt.Errorf("%w: Dialect: %q is not one of %q, %q, %q", ErrInvalidConfig, string(cfg.Dialect), Postgres, MySQL, SQLite)
	}
	if cfg.MaxPayload < 0 {
		return nil, fmt.Errorf("%w: MaxPayload: %d: must be 0 (not checked) or the server's max_payload in bytes", ErrInvalidConfig, cfg.MaxPayload)
	}
	return &Writer{table: cfg.Table, dialect: cfg.Dialect, impl: impl, insert: impl.insertSQL(cfg.Table), maxPayload: cfg.MaxPayload}, nil
}

// Table is the outbox table the Writer inserts into.
func (w *Writer) Table() string { return w.table }

// Dialect is the database the Writer writes SQL for.
func (w *Writer) Dialect() Dialect { return w.dialect }
