// Package testdb gives tests their own table in the real databases: a
// SQLite file in a temp dir, a fresh schema in the PostgreSQL of
// BRIDGE_TEST_POSTGRES_URL, a fresh database in the MySQL/MariaDB of
// BRIDGE_TEST_MYSQL_URL. Without those variables the tests that need them
// are skipped, except under CI=true, where they fail. It imports nothing of
// the bridge, so that the tests inside internal/outbox can use it
// (bridgetest, which builds on outbox, re-exports it).
package testdb
