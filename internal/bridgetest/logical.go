package bridgetest

import (
	"context"
	"database/sql"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// PostgresLogicalURL returns the logical test server's URL. Without it the
// test is skipped, saying how to get one, except under CI (CI=true), where
// .ci/run always provides one and its absence fails the test.
func PostgresLogicalURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(PostgresLogicalURLEnv)
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set; .ci/run must provide PostgreSQL with wal_level = logical", PostgresLogicalURLEnv)
		}
		skipNotice()
		t.Skipf("%s is not set: postgres-wal tests need PostgreSQL 14+ with wal_level = logical; "+
			`start a throwaway server with: eval "$(.ci/postgres-logical start)"`, PostgresLogicalURLEnv)
	}
	return url
}

// PostgresLogicalTable creates a fresh schema in the logical test server
// and returns the server URL and a schema-qualified table name in it; the
// schema is dropped when the test ends.
func PostgresLogicalTable(t testing.TB) (url, table string) {
	t.Helper()
	url = PostgresLogicalURL(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	schema := "t_" + randomHex(6)
	_, err = db.Exec("CREATE SCHEMA " + schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE")
	})
	return url, schema + ".outbox"
}

// WALNames returns a replication slot and a publication name unique to the
// test. Both are dropped when the test ends: slots belong to the whole
// server and keep its WAL, so none may outlive its test.
func WALNames(t testing.TB, url string) (slot, publication string) {
	t.Helper()
	suffix := randomHex(6)
	slot, publication = "s_"+suffix, "p_"+suffix
	t.Cleanup(func() { DropSlot(t, url, slot); dropPublication(url, publication) })
	return slot, publication
}

// DropSlot drops a replication slot once no connection holds it (a relay
// that just stopped may still hold it for a moment); a missing slot is
// fine.
func DropSlot(t testing.TB, url, slot string) {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Errorf("drop slot %s: %v", slot, err)
		return
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := db.QueryRow(`SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots
WHERE slot_name = $1 AND NOT active`, slot).Scan(&n)
		var left int
		if err == nil {
			err = db.QueryRow(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&left)
		}
		if err == nil && left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("replication slot %s is still there (in use?): %v", slot, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func dropPublication(url, publication string) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return
	}
	defer db.Close()
	_, _ = db.Exec("DROP PUBLICATION IF EXISTS " + publication)
}

// Oracle decodes the log independently of the relay, with PostgreSQL's
// test_decoding plugin on a slot of its own created before the rows are
// written: it tells a test the commit order of the rows and where each
// transaction's commit ends, to hold the relay's stream and slot positions
// against.
type Oracle struct {
	url, slot, table string
}

// NewOracle creates the oracle's slot (dropped when the test ends). table
// is the schema-qualified table whose inserts it reports.
func NewOracle(t testing.TB, url, table string) *Oracle {
	t.Helper()
	o := &Oracle{url: url, slot: "o_" + randomHex(6), table: table}
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec("SELECT pg_create_logical_replication_slot($1, 'test_decoding')", o.slot)
	require.NoError(t, err)
	t.Cleanup(func() { DropSlot(t, url, o.slot) })
	return o
}

// Committed is one inserted row as the oracle saw it.
type Committed struct {
	ID int64
	// CommitEnd is the end of its transaction's commit record, the
	// position a relay confirms once the transaction is relayed.
	CommitEnd uint64
}

var oracleInsert = regexp.MustCompile(`^table ([a-z0-9_]+\.[a-z0-9_]+): INSERT: id\[bigint\]:(\d+) `)

// Rows returns the inserts committed so far, in commit order.
func (o *Oracle) Rows(t testing.TB) []Committed {
	t.Helper()
	db, err := sql.Open("pgx", o.url)
	require.NoError(t, err)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT pg_wal_lsn_diff(lsn, '0/0')::bigint, data FROM pg_logical_slot_peek_changes($1, NULL, NULL, 'include-xids', '0', 'skip-empty-xacts', '1')`, o.slot)
	require.NoError(t, err)
	defer rows.Close()
	var out []Committed
	open := 0 // rows of the transaction being read
	for rows.Next() {
		var lsn uint64
		var data string
		require.NoError(t, rows.Scan(&lsn, &data))
		switch {
		case data == "BEGIN":
			open = 0
		case data == "COMMIT":
			for i := len(out) - open; i < len(out); i++ {
				out[i].CommitEnd = lsn
			}
			open = 0
		default:
			m := oracleInsert.FindStringSubmatch(data)
			if m == nil || m[1] != o.table {
				continue
			}
			id, err := strconv.ParseInt(m[2], 10, 64)
			require.NoError(t, err)
			out = append(out, Committed{ID: id})
			open++
		}
	}
	require.NoError(t, rows.Err())
	return out
}
