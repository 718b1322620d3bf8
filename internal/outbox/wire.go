package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/wire"

	"github.com/outbox-bridge/bridge/internal/config"
)

// ProviderSet builds the outbox side of the relay from the configuration.
var ProviderSet = wire.NewSet(ProvideDB, ProvideStore, ProvideTableCollector)

// PayloadLimit returns the NATS server's max_payload in bytes
// (nats.Conn.MaxPayload), or 0 when unknown.
type PayloadLimit func() int64

// ProvideDB opens the configured database. The embedded default (no
// database.url) is migrated here; any other database must be migrated with
// `bridge migrate`.
func ProvideDB(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*DB, func(), error) {
	db, err := OpenSession(ctx, cfg.DatabaseURL(), ConfiguredSession(cfg))
	if err != nil {
		return nil, nil, err
	}
	if cfg.EmbeddedDatabase() {
		applied, err := Migrate(ctx, db, cfg.Database.Table)
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		if len(applied) > 0 {
			logger.Info("embedded outbox database migrated", slog.String("database", db.Redacted), slog.Int("migrations", len(applied)))
		}
	}
	return db, func() { db.Close() }, nil
}

// ConfiguredSession is the Session of the configuration: named after the
// relay owner (relay.owner, by default <hostname>-<pid>) and bounded by
// database.conn_max_lifetime and database.conn_max_idle_time, opened within
// database.connect_timeout.
func ConfiguredSession(cfg *config.Config) Session {
	return Session{
		Name:           SessionName(cfg.Relay.Owner),
		MaxLifetime:    cfg.Database.ConnMaxLifetime,
		MaxIdleTime:    cfg.Database.ConnMaxIdleTime,
		ConnectTimeout: cfg.Database.ConnectTimeout,
	}
}

// ProvideStore returns the store of the configured table, after checking
// that the table exists (ErrNoTable says to run `bridge migrate`). A schema
// older than this build's is logged as a warning: the relay works on it,
// without what the newer migrations add (an index of the claim, so far).
func ProvideStore(ctx context.Context, db *DB, cfg *config.Config, logger *slog.Logger) (*Store, error) {
	store, err := NewStore(db, cfg.Database.Table)
	if err != nil {
		return nil, err
	}
	if err := store.CheckSchema(ctx); err != nil {
		return nil, err
	}
	current, target, err := SchemaVersions(ctx, db, cfg.Database.Table)
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
