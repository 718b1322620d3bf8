package producer

import "context"

// postgresDialect targets PostgreSQL 13+. The headers parameter is cast to
// jsonb in SQL, so that it can be bound as text by any driver.
type postgresDialect struct{}

func (postgresDialect) insertSQL(table string) string {
	return insertStatement("postgres", table)
}

func (postgresDialect) insert(ctx context.Context, tx runner, query string, args ...any) (int64, bool, error) {
	// A row back is the new id; no row, an existing key.
	return tx.queryID(ctx, query, args...)
}

// PostgreSQL text columns have no length bound worth checking here (a
// unique index entry over about 2,700 bytes is refused by the database).
func (postgresDialect) limits() limits { return limits{} }
