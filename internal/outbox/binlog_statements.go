package outbox

import (
	"fmt"

	"github.com/go-sql-driver/mysql"
)

// BinlogStatements are the statements of the mysql-binlog source
// (internal/source/mysqlbinlog) on the outbox table and its position
// table (<table>_binlog): queries/mysql/binlog_*.sql, rendered for one
// table. Each file says its parameters and columns. The comments ids and
// arms in them are expanded for a batch by ExpandMySQL.
type BinlogStatements struct {
	// Statuses reads the status of the rows read from the log (a locking
	// read); MarkDone, DeleteDone and MarkFailed settle them.
	Statuses, MarkDone, DeleteDone, MarkFailed string
	// SweepRead reads the rows the log will not bring; Asides the ordering
	// keys with failed rows; Reread the rows of a transaction read in parts.
	SweepRead, Asides, Reread string
	// PositionCreate, PositionRead, PositionWrite and PositionDrop are the
	// position table's.
	PositionCreate, PositionRead, PositionWrite, PositionDrop string
}

func takeBinlogStatements(f *queryFiles) BinlogStatements {
	return BinlogStatements{
		Statuses: f.take("binlog_statuses"), MarkDone: f.take("binlog_mark_done"), DeleteDone: f.take("binlog_delete_done"),
		MarkFailed: f.take("binlog_mark_failed"), SweepRead: f.take("binlog_sweep_read"), Asides: f.take("binlog_asides"), Reread: f.take("binlog_reread"),
		PositionCreate: f.take("binlog_position_create"), PositionRead: f.take("binlog_position_read"),
		PositionWrite: f.take("binlog_position_write"), PositionDrop: f.take("binlog_position_drop"),
	}
}

// BinlogStatements returns the mysql-binlog source's statements for the
// store's table; false when the store is not on MySQL or MariaDB.
func (s *Store) BinlogStatements() (BinlogStatements, bool) {
	e, ok := s.exec.(*mysqlExecutor)
	if !ok {
		return BinlogStatements{}, false
	}
	return e.binlog, true
}

// ExpandMySQL writes n rows' placeholders into a MySQL statement of
// queries/mysql: /*ids*/ becomes "?, ?, …" and /*arms*/ "WHEN ? THEN ? …",
// n of each.
func ExpandMySQL(query string, n int) string { return mysqlExpand(query, n) }

// MySQLConfig is the go-sql-driver configuration of a mysql:// database
// URL, as the relay's own sessions use it (see Open): for a connection
// the driver does not make, such as the binary log's replication
// connection. Errors: ErrUnknownScheme (wrapped), naming the redacted URL.
func MySQLConfig(rawURL string) (*mysql.Config, error) { return mysqlConfig(rawURL) }

// BinlogPositionScript is the DDL of the mysql-binlog source's position
// table (<table>_binlog) for `bridge migrate --print`, with a comment
// saying what it holds; the relay stores the first position itself.
// Errors: a table name ParseTableName refuses.
func BinlogPositionScript(table string) (string, error) {
	t, err := ParseTableName(table)
	if err != nil {
		return "", err
	}
	d, _ := driverOf(DialectMySQL)
	f, err := loadQueries(d, t)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("\n-- source: mysql-binlog: the relay's position in the binary log. bridge migrate creates it\n"+
		"-- and stores the server's current position; made by hand, it stays empty until bridge run\n"+
		"-- stores the position at its first start (after a sweep of the rows pending before it).\n%s;\n",
		takeBinlogStatements(f).PositionCreate), nil
}
