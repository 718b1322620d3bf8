package outbox

import (
	"context"
	"log/slog"
	"time"
)

// PayloadLimit returns the NATS server's max_payload in bytes
// (nats.Conn.MaxPayload), or 0 when unknown.
type PayloadLimit func() int64

// OpenStore returns the store of table in db, after checking
// that the table exists (ErrNoTable says to run `bridge migrate`). A schema
// older than this build's is logged as a warning: the relay works on it,
// without what the newer migrations add (an index of the claim, so far).
func OpenStore(ctx context.Context, db *DB, table string, logger *slog.Logger) (*Store, error) {
	store, err := NewStore(db, table)
	if err != nil {
		return nil, err
	}
	if err := store.CheckSchema(ctx); err != nil {
		return nil, err
	}
	current, target, err := SchemaVersions(ctx, db, table)
	switch {
	case err != nil:
		logger.Debug("outbox schema version unknown", slog.Any("error", err))
	case current < target:
		logger.Warn("outbox schema is older than this bridge: run `bridge migrate` (same --database-url and --table) to apply the rest",
			slog.String("table", store.Table()), slog.Int64("schema_version", current), slog.Int64("bridge_schema_version", target))
	}
	return store, nil
}

// ProvideTableCollector reads the table's counts and lag at most every 15 s.
func ProvideTableCollector(store *Store) *TableCollector {
	return NewTableCollector(store, 15*time.Second)
}
