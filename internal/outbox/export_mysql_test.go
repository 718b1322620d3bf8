package outbox

// MySQLCandidatesSQL exposes the first statement of the MySQL claim (the
// non-locking read of claimable ids, claim_candidates.sql; parameters:
// MySQLCandidatesArgs) to tests.
func MySQLCandidatesSQL(table string) (string, bool) {
	ex, ok := executorFor(mysqlDriver{}, table)
	if !ok {
		return "", false
	}
	return ex.(*mysqlExecutor).q.claimCandidates, true
}

// MySQLCandidatesArgs are the parameters of MySQLCandidatesSQL for want
// candidates from the key cursor.
func MySQLCandidatesArgs(cursor string, want int) []any { return mysqlCandidateArgs(cursor, want) }

// MySQLMaintenanceSQL exposes the in-flight recovery's read of stale
// leases (requeue_stale.sql) and retention's delete (purge.sql) to tests.
func MySQLMaintenanceSQL(table string) (requeueStale, purge string, ok bool) {
	ex, ok := executorFor(mysqlDriver{}, table)
	if !ok {
		return "", "", false
	}
	e := ex.(*mysqlExecutor)
	return e.q.requeueStale, e.q.purge, true
}
