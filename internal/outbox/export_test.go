package outbox

// PostgresClaimSQL exposes the PostgreSQL claim statement to tests.
func PostgresClaimSQL(table string) (string, bool) {
	t, err := ParseTableName(table)
	if err != nil {
		return "", false
	}
	return postgresDialect{}.sqlFor(t).claim, true
}
