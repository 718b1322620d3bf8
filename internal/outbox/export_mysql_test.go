package outbox

import "strings"

// MySQLCandidatesSQL exposes the first statement of the MySQL claim (the
// non-locking read of claimable ids; parameters: limit, four times) to
// tests.
func MySQLCandidatesSQL(table string) (string, bool) {
	t, err := ParseTableName(table)
	if err != nil {
		return "", false
	}
	return strings.Split(mysqlDialect{}.sqlFor(t).claim, mysqlClaimSep)[0], true
}
