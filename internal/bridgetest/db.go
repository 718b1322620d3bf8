package bridgetest

import (
	"testing"

	"github.com/outbox-bridge/bridge/internal/bridgetest/testdb"
)

// The test databases, from testdb (see there).
const (
	PostgresURLEnv        = testdb.PostgresURLEnv
	MySQLURLEnv           = testdb.MySQLURLEnv
	PostgresLogicalURLEnv = testdb.PostgresLogicalURLEnv
)

// PostgresURL returns the test server URL: testdb.PostgresURL.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return testdb.PostgresURL(t)
}

// PostgresTable creates a fresh schema in the test server:
// testdb.PostgresTable.
func PostgresTable(t testing.TB) (url, table string) {
	t.Helper()
	return testdb.PostgresTable(t)
}

// PostgresDatabase creates a fresh database in the test server:
// testdb.PostgresDatabase.
func PostgresDatabase(t testing.TB) string {
	t.Helper()
	return testdb.PostgresDatabase(t)
}

// MySQLURL returns the test server URL: testdb.MySQLURL.
func MySQLURL(t testing.TB) string {
	t.Helper()
	return testdb.MySQLURL(t)
}

// MySQLTable creates a fresh database in the test server:
// testdb.MySQLTable.
func MySQLTable(t testing.TB) (url, table string) {
	t.Helper()
	return testdb.MySQLTable(t)
}

// MySQLBinlogURL is the binary log test server's URL:
// testdb.MySQLBinlogURL.
func MySQLBinlogURL(t testing.TB) string {
	t.Helper()
	return testdb.MySQLBinlogURL(t)
}

// MySQLBinlogTable creates a fresh database in the binary log test server:
// testdb.MySQLBinlogTable.
func MySQLBinlogTable(t testing.TB) (url, table string) {
	t.Helper()
	return testdb.MySQLBinlogTable(t)
}

// SQLiteURL is a database URL for a new SQLite file in a temp dir.
func SQLiteURL(t testing.TB) string {
	t.Helper()
	return testdb.SQLiteURL(t)
}

var (
	skipNotice = testdb.SkipNotice
	randomHex  = testdb.RandomHex
)
