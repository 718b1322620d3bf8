package outbox

// PostgresClaimSQL exposes the PostgreSQL claim statement to tests.
func PostgresClaimSQL(table string) (string, bool) {
	t, err := ParseTableName(table)
	if err != nil {
		return "", false
	}
	return postgresDialect{}.sqlFor(t).claim, true
}

// SQLiteClaimSQL exposes the SQLite claim statement to tests.
func SQLiteClaimSQL(table string) (string, bool) {
	t, err := ParseTableName(table)
	if err != nil {
		return "", false
	}
	return sqliteDialect{}.sqlFor(t).claim, true
}

// MessageHeaderBytes exposes messageHeaderBytes to tests.
func MessageHeaderBytes(h map[string][]string) int64 { return messageHeaderBytes(h) }

// RelayHeaderMinBytes exposes relayHeaderMinBytes to tests.
var RelayHeaderMinBytes = relayHeaderMinBytes
