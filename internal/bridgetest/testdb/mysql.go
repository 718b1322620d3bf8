package testdb

import (
	"database/sql"
	"net"
	"net/url"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// MySQLURLEnv names the variable holding the MySQL or MariaDB test server
// URL, mysql://user:password@host:port/database.
const MySQLURLEnv = "BRIDGE_TEST_MYSQL_URL"

// MySQLURL returns the test server URL. Without it the test is skipped,
// except under CI (CI=true), where a missing server fails the test: .ci/run
// always provides one.
func MySQLURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(MySQLURLEnv)
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set; .ci/run must provide MariaDB", MySQLURLEnv)
		}
		SkipNotice()
		t.Skipf("%s is not set: MySQL/MariaDB tests need a server (see docs/DEVELOPMENT.md, Run the tests)", MySQLURLEnv)
	}
	return url
}

// MySQLTable creates a fresh database in the test server and returns the
// server URL and a table name qualified by that database (MySQL has no
// schemas; a database plays their part): t_<random>.outbox. The database
// is dropped when the test ends. Tests on one server never share a table.
func MySQLTable(t testing.TB) (url, table string) {
	t.Helper()
	return mysqlTable(t, MySQLURL(t))
}

// MySQLBinlogURLEnv names the URL of a MariaDB (or MySQL) server with the
// binary log on (row format, full row images), for the tests of source:
// mysql-binlog; .ci/mariadb-binlog starts one.
const MySQLBinlogURLEnv = "BRIDGE_TEST_MYSQL_BINLOG_URL"

// MySQLBinlogURL returns the binary log test server's URL. Without it the
// test is skipped, saying how to get one, except under CI (CI=true), where
// .ci/run always provides one and its absence fails the test.
func MySQLBinlogURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(MySQLBinlogURLEnv)
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set; .ci/run must provide MariaDB with the binary log on", MySQLBinlogURLEnv)
		}
		SkipNotice()
		t.Skipf("%s is not set: mysql-binlog tests need MariaDB with log_bin and binlog_format = ROW; "+
			`start a throwaway server with: eval "$(.ci/mariadb-binlog start)"`, MySQLBinlogURLEnv)
	}
	return url
}

// MySQLBinlogTable is MySQLTable on the binary log test server.
func MySQLBinlogTable(t testing.TB) (url, table string) {
	t.Helper()
	return mysqlTable(t, MySQLBinlogURL(t))
}

func mysqlTable(t testing.TB, url string) (string, string) {
	t.Helper()
	db, err := sql.Open("mysql", mysqlDSN(t, url))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	database := "t_" + RandomHex(6)
	_, err = db.Exec("CREATE DATABASE " + database)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Exec("DROP DATABASE " + database)
	})
	return url, database + ".outbox"
}

// mysqlDSN turns the test server URL into a driver DSN.
func mysqlDSN(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err, MySQLURLEnv)
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr = "tcp", u.Host
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.DBName = u.Path[min(1, len(u.Path)):]
	dsn := cfg.FormatDSN()
	if u.RawQuery != "" {
		dsn += "?" + u.RawQuery
	}
	return dsn
}
