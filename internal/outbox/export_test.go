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

// RelayHeaderMinBytes exposes relayHeaderMinBytes to tests.
var RelayHeaderMinBytes = relayHeaderMinBytes
