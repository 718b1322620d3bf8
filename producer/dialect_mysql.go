package producer

import (
	"context"
	"fmt"
)

// mysqlDialect targets MySQL 8.0.16+ and MariaDB 10.6+, which have no
// INSERT … RETURNING. The INSERT ends with ON DUPLICATE KEY UPDATE id = id,
// an update that changes nothing: not INSERT IGNORE, which would also turn
// other errors (a bad JSON, a value too long) into warnings.
//
// The statement's result tells which happened. A new row: 1 affected row
// and its AUTO_INCREMENT id as the insert id. An existing key: 0 affected
// rows (1 when the connection sets CLIENT_FOUND_ROWS, e.g. go-sql-driver's
// clientFoundRows=true, as matched rows are then counted) and insert id 0.
// The insert id is 0 when no row was inserted and the statement used no
// LAST_INSERT_ID(expr) (MySQL C API, mysql_insert_id(); the same on
// MariaDB, tested on 10.11), and AUTO_INCREMENT ids start at 1, so an
// insert id of 0 means an existing key whatever the connection's flags.
type mysqlDialect struct{}

// mysqlKeyMax is the longest idempotency or ordering key the MySQL table
// holds, in bytes: both columns are VARBINARY(255) (see the relay's
// migrations/mysql). A session without strict SQL mode would cut a longer
// key silently, merging two events, so longer keys are refused before the
// INSERT.
const mysqlKeyMax = 255

// mysqlSubjectMax is the longest subject a MySQL TEXT column holds, in
// bytes.
const mysqlSubjectMax = 65535

func (mysqlDialect) insertSQL(table string) string {
	return insertStatement("mysql", table)
}

func (mysqlDialect) insert(ctx context.Context, tx runner, query string, args ...any) (int64, bool, error) {
	affected, id, err := tx.exec(ctx, query, args...)
	if err != nil {
		return 0, false, err
	}
	switch {
	case affected == 0 || (affected == 1 && id == 0):
		return 0, false, nil
	case affected == 1:
		return id, true, nil
	}
	return 0, false, fmt.Errorf("unexpected result of INSERT … ON DUPLICATE KEY UPDATE: %d rows affected, insert id %d", affected, id)
}

func (mysqlDialect) limits() limits {
	return limits{key: mysqlKeyMax, orderingKey: mysqlKeyMax, subject: mysqlSubjectMax}
}
