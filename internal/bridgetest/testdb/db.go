package testdb

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
)

// PostgresURLEnv names the variable holding the PostgreSQL test server URL.
const PostgresURLEnv = "BRIDGE_TEST_POSTGRES_URL"

// PostgresURL returns the test server URL. Without it the test is skipped,
// except under CI (CI=true), where a missing server fails the test: .ci/run
// always provides one.
func PostgresURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(PostgresURLEnv)
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set; .ci/run must provide PostgreSQL", PostgresURLEnv)
		}
		SkipNotice()
		t.Skipf("%s is not set: PostgreSQL tests need a server (see docs/DEVELOPMENT.md, Run the tests)", PostgresURLEnv)
	}
	return url
}

// PostgresTable creates a fresh schema in the test server and returns the
// server URL and a schema-qualified table name in it; the schema is dropped
// when the test ends. Tests on one server never share a table.
func PostgresTable(t testing.TB) (url, table string) {
	t.Helper()
	url = PostgresURL(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	schema := "t_" + RandomHex(6)
	_, err = db.Exec("CREATE SCHEMA " + schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE")
	})
	return url, schema + ".outbox"
}

// PostgresDatabase creates a fresh database in the test server and returns
// its URL; the database is dropped, its sessions ended, when the test ends.
// It is for tests that change database settings (ALTER DATABASE … SET),
// which must never touch the server's shared database.
func PostgresDatabase(t testing.TB) string {
	t.Helper()
	server := PostgresURL(t)
	db, err := sql.Open("pgx", server)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	name := "t_" + RandomHex(6)
	_, err = db.Exec("CREATE DATABASE " + name)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Exec("DROP DATABASE " + name + " WITH (FORCE)")
	})
	u, err := url.Parse(server)
	require.NoError(t, err, PostgresURLEnv)
	u.Path = "/" + name
	return u.String()
}

// SQLiteURL is a database URL for a new SQLite file in a temp dir.
func SQLiteURL(t testing.TB) string {
	t.Helper()
	return "sqlite:" + filepath.Join(t.TempDir(), "outbox.db")
}

// RandomHex returns n random bytes in hex, for names that tests must not
// share.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
