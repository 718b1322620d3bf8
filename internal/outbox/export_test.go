package outbox

// PostgresClaimSQL exposes the PostgreSQL claim statement (claim.sql) to
// tests.
func PostgresClaimSQL(table string) (string, bool) {
	ex, ok := executorFor(postgresDriver{}, table)
	if !ok {
		return "", false
	}
	return ex.(*postgresExecutor).q.claim, true
}

// PostgresReadSQL exposes the PostgreSQL stall check (stalled.sql) and
// oldest failed row (oldest_failed.sql) to tests.
func PostgresReadSQL(table string) (stalled, oldestFailed string, ok bool) {
	ex, ok := executorFor(postgresDriver{}, table)
	if !ok {
		return "", "", false
	}
	e := ex.(*postgresExecutor)
	return e.q.stalled, e.oldestFailed, true
}

// PostgresMarkSQL exposes the PostgreSQL marks (mark_done.sql,
// delete_done.sql, mark_failed.sql) to tests.
func PostgresMarkSQL(table string) (done, del, failed string, ok bool) {
	ex, ok := executorFor(postgresDriver{}, table)
	if !ok {
		return "", "", "", false
	}
	q := ex.(*postgresExecutor).q
	return q.markDone, q.deleteDone, q.markFailed, true
}

// PostgresReplayReadSQL exposes the PostgreSQL replay read
// (replay_read.sql) to tests.
func PostgresReplayReadSQL(table string) (string, bool) {
	ex, ok := executorFor(postgresDriver{}, table)
	if !ok {
		return "", false
	}
	return ex.(*postgresExecutor).replayRead, true
}

// SQLiteClaimSQL exposes the SQLite claim statement (claim.sql) to tests.
func SQLiteClaimSQL(table string) (string, bool) {
	ex, ok := executorFor(sqliteDriver{}, table)
	if !ok {
		return "", false
	}
	return ex.(*sqliteExecutor).q.claim, true
}

// executorFor renders d's statements for table, without a database.
func executorFor(d driver, table string) (executor, bool) {
	t, err := ParseTableName(table)
	if err != nil {
		return nil, false
	}
	ex, err := d.executor(&DB{driver: d}, t)
	return ex, err == nil
}

// MessageHeaderBytes exposes messageHeaderBytes to tests.
func MessageHeaderBytes(h map[string][]string) int64 { return messageHeaderBytes(h) }
