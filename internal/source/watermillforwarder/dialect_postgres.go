package watermillforwarder

import (
	"context"
	"fmt"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// postgresDialect reads with DefaultPostgreSQLSchema and
// DefaultPostgreSQLOffsetsAdapter: tables "watermill_<topic>" and
// "watermill_offsets_<topic>", unqualified, so they resolve through the
// connection's search_path as they do for the service.
type postgresDialect struct{}

func (postgresDialect) adapters(batchSize int) (wmsql.SchemaAdapter, wmsql.OffsetsAdapter) {
	return wmsql.DefaultPostgreSQLSchema{SubscribeBatchSize: batchSize}, wmsql.DefaultPostgreSQLOffsetsAdapter{}
}

func (postgresDialect) tableExists(ctx context.Context, db *outbox.DB, table string) (bool, error) {
	var found *string
	// to_regclass resolves the quoted name as the adapters' queries do.
	err := db.SQL.QueryRowContext(ctx, `SELECT to_regclass($1)::text`, `"`+table+`"`).Scan(&found)
	return found != nil, err
}

// createOffsetsTable runs the adapter's DDL in a transaction holding the
// advisory lock watermill-sql's schema initialisation takes
// (DefaultSchemaInitializationLock("watermill")), so that it does not race
// a service's publisher creating its tables (concurrent CREATE TABLE IF NOT
// EXISTS can fail with a unique violation in PostgreSQL).
func (d postgresDialect) createOffsetsTable(ctx context.Context, db *outbox.DB, topic string) error {
	_, offsets := d.adapters(1)
	queries, err := offsets.SchemaInitializingQueries(wmsql.OffsetsSchemaInitializingQueriesParams{Topic: topic})
	if err != nil {
		return err
	}
	tx, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", wmsql.DefaultSchemaInitializationLock("watermill"))); err != nil {
		return err
	}
	for _, q := range queries {
		if _, err := tx.ExecContext(ctx, q.Query, q.Args...); err != nil {
			return err
		}
	}
	return tx.Commit()
}
