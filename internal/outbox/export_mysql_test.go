package outbox

import "strings"

// MySQLCandidatesSQL exposes the first statement of the MySQL claim (the
// non-locking read of claimable ids; parameters: MySQLCandidatesArgs) to
// tests.
func MySQLCandidatesSQL(table string) (string, bool) {
	t, err := ParseTableName(table)
	if err != nil {
		return "", false
	}
	return strings.Split(mysqlDialect{}.sqlFor(t).claim, mysqlClaimSep)[0], true
}

// MySQLCandidatesArgs are the parameters of MySQLCandidatesSQL for want
// candidates from the key cursor.
func MySQLCandidatesArgs(cursor string, want int) []any { return mysqlCandidateArgs(cursor, want) }
