// Package bridgetest starts the real servers tests run against: an
// in-process NATS server with JetStream per test, SQLite in a temp dir, and
// a fresh schema in the PostgreSQL of BRIDGE_TEST_POSTGRES_URL. Nothing here
// mocks a database or the broker.
package bridgetest
