package producer

import "context"

// sqliteDialect targets SQLite 3.35+ (RETURNING). The headers column is
// TEXT holding JSON.
type sqliteDialect struct{}

func (sqliteDialect) insertSQL(table string) string {
	return insertStatement("sqlite", table)
}

func (sqliteDialect) insert(ctx context.Context, tx runner, query string, args ...any) (int64, bool, error) {
	// A row back is the new id; no row, an existing key.
	return tx.queryID(ctx, query, args...)
}

func (sqliteDialect) limits() limits { return limits{} }
