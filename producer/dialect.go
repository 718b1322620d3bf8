package producer

import "context"

// Dialect names the database an outbox table lives in. Its values are the
// names the relay uses for the same databases.
type Dialect string

// Dialects. SQL for each is in dialect_<name>.go.
const (
	// Postgres is PostgreSQL 13 or newer: $n placeholders, INSERT … ON
	// CONFLICT (idempotency_key) DO NOTHING RETURNING id.
	Postgres Dialect = "postgres"
	// MySQL is MySQL 8.0.16+ or MariaDB 10.6+: ? placeholders, INSERT … ON
	// DUPLICATE KEY UPDATE id = id, keys of at most 255 bytes.
	MySQL Dialect = "mysql"
	// SQLite is SQLite 3.35 or newer: ? placeholders, INSERT … ON CONFLICT
	// (idempotency_key) DO NOTHING RETURNING id.
	SQLite Dialect = "sqlite"
)

var dialects = map[Dialect]dialect{
	Postgres: postgresDialect{},
	MySQL:    mysqlDialect{},
	SQLite:   sqliteDialect{},
}

// dialect is what differs between databases.
type dialect interface {
	// insertSQL is the INSERT of one row into table, with parameters
	// idempotency_key, subject, payload, headers (JSON text), ordering_key
	// (NULL for none).
	insertSQL(table string) string
	// insert runs query with args in tx. It returns the new row's id, or
	// inserted = false when a row with the idempotency key exists.
	insert(ctx context.Context, tx runner, query string, args ...any) (id int64, inserted bool, err error)
	// limits are the table's bounds on the event's text, in bytes.
	limits() limits
}

// limits bound an event's text columns, and its message (maxPayload), in
// bytes; 0 is no bound.
type limits struct {
	key, orderingKey, subject int
	maxPayload                int64
}

// runner is a transaction of either driver: *sql.Tx or pgx.Tx behind an
// adapter (see tx.go).
type runner interface {
	// queryID runs a statement that returns at most one row holding one
	// integer; found is false when it returned none.
	queryID(ctx context.Context, query string, args ...any) (id int64, found bool, err error)
	// exec runs a statement and returns the rows it affected and the id
	// the database generated for it (MySQL's insert id; 0 for none).
	exec(ctx context.Context, query string, args ...any) (affected, insertID int64, err error)
}
