// Package bridgetest starts the real servers tests run against: an
// in-process NATS server with JetStream per test (and 3-node clusters, TLS
// and operator-mode servers), SQLite in a temp dir, a fresh schema in the
// PostgreSQL of BRIDGE_TEST_POSTGRES_URL and a fresh database in the
// MySQL/MariaDB of BRIDGE_TEST_MYSQL_URL. Without those variables the tests
// that need them are skipped, except under CI=true, where they fail.
// Nothing here mocks a database or the broker.
package bridgetest
