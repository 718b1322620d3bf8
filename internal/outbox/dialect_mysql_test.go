package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

func TestMySQLSessionSettings(t *testing.T) {
	t.Parallel()
	s := setup(t, "mysql")
	var tz, mode string
	var skew float64
	require.NoError(t, s.DB().SQL.QueryRow("SELECT @@time_zone, @@sql_mode, ABS(TIMESTAMPDIFF(SECOND, NOW(), UTC_TIMESTAMP()))").Scan(&tz, &mode, &skew))
	require.Equal(t, "+00:00", tz)
	require.Contains(t, mode, "STRICT_ALL_TABLES")
	require.Zero(t, skew, "NOW() is UTC in the relay's sessions")
	var isolation string
	err := s.DB().SQL.QueryRow("SELECT @@transaction_isolation").Scan(&isolation)
	if err != nil { // MariaDB before 11.1
		require.NoError(t, s.DB().SQL.QueryRow("SELECT @@tx_isolation").Scan(&isolation))
	}
	require.Equal(t, "READ-COMMITTED", isolation)
}

// A producer's session time zone does not matter: defaults are
// UTC_TIMESTAMP(6), not NOW().
func TestMySQLTimesAreUTCWhateverTheProducerSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "mysql")
	conn, err := s.DB().SQL.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = conn.ExecContext(ctx, "SET time_zone = '+05:00'")
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "INSERT INTO "+s.Table()+" (idempotency_key, subject, payload) VALUES ('k', 'events.t', 'x')")
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "SET time_zone = '+00:00'") // the pool's default again
	require.NoError(t, err)

	st, err := s.Stats(ctx, 0)
	require.NoError(t, err)
	require.Less(t, st.OldestPending, time.Minute, "created_at is UTC")
	rows, err := s.Claim(ctx, "r", 10)
	require.NoError(t, err)
	require.Len(t, rows, 1, "available_at is not five hours ahead")
	require.WithinDuration(t, time.Now().UTC(), rows[0].CreatedAt, time.Minute)
	require.WithinDuration(t, time.Now().UTC(), rows[0].ClaimedAt, time.Minute)
	require.Equal(t, time.UTC, rows[0].ClaimedAt.Location())
}

// utf8mb4_bin pads with spaces ('k' = 'k '); the key columns are
// VARBINARY so that two keys differing in trailing spaces stay two events.
func TestMySQLKeysCompareByteForByte(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "mysql")
	a := enqueue(t, s, "k", "A")
	b := enqueue(t, s, "k ", "A ")
	c := enqueue(t, s, "K", "a")
	require.Equal(t, []int64{a, b, c}, claimIDs(t, s, "r"), "three keys, three ordering keys")

	_, err := s.Enqueue(ctx, outbox.Entry{IdempotencyKey: "k", Subject: "events.t"})
	require.ErrorIs(t, err, outbox.ErrAlreadyEnqueued)

	_, err = s.Enqueue(ctx, outbox.Entry{IdempotencyKey: strings.Repeat("x", 256), Subject: "events.t"})
	require.ErrorContains(t, err, "at most 255 bytes")
	_, err = s.Enqueue(ctx, outbox.Entry{IdempotencyKey: "long-ordering", Subject: "events.t", OrderingKey: strings.Repeat("é", 128)})
	require.ErrorContains(t, err, "ordering key")
	// A producer writing its own INSERT is refused by the database
	// (strict mode) rather than having its key cut.
	_, err = s.DB().SQL.Exec("INSERT INTO "+s.Table()+" (idempotency_key, subject, payload) VALUES (?, 'events.t', '')", strings.Repeat("y", 256))
	require.ErrorContains(t, err, "Data too long")

	// 255 bytes is fine.
	enqueue(t, s, strings.Repeat("z", 255), "")
}

func TestMySQLHeadersMustBeJSON(t *testing.T) {
	t.Parallel()
	s := setup(t, "mysql")
	_, err := s.DB().SQL.Exec("INSERT INTO "+s.Table()+" (idempotency_key, subject, payload, headers) VALUES ('k', 'events.t', '', ?)", "{not json")
	require.Error(t, err, "the JSON column (MariaDB: a CHECK) refuses a malformed document")
	_, err = s.DB().SQL.Exec("INSERT INTO " + s.Table() + " (idempotency_key, subject, payload) VALUES ('k2', 'events.t', '')")
	require.NoError(t, err)
	rows, err := s.Claim(context.Background(), "r", 1)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "{}", string(rows[0].Headers), "headers default to an empty object")
	require.Equal(t, []byte{}, rows[0].Payload)
	require.False(t, rows[0].OrderingKey.Valid)
}

// The mark statements are built per batch: ids repeat across claims of one
// row and batches can exceed one statement's placeholders.
func TestMarksOfLargeBatchesAndRepeatedIDs(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, kind)
			tx, err := s.DB().SQL.Begin()
			require.NoError(t, err)
			q := "INSERT INTO " + s.Table() + " (idempotency_key, subject, payload, headers) VALUES (?, 'events.t', '', '{}')"
			if kind == "postgres" {
				q = "INSERT INTO " + s.Table() + " (idempotency_key, subject, payload, headers) VALUES ($1, 'events.t', '', '{}')"
			}
			const n = 1200
			for i := range n {
				_, err := tx.Exec(q, fmt.Sprintf("k%04d", i))
				require.NoError(t, err)
			}
			require.NoError(t, tx.Commit())
			rows, err := s.Claim(ctx, "r", n)
			require.NoError(t, err)
			require.Len(t, rows, n)

			var failures []outbox.Failure
			for i, r := range rows {
				failures = append(failures, outbox.Failure{ID: r.ID, Attempt: r.Attempt, Err: "e" + itoa(i), Permanent: i%2 == 0, Refund: i%3 == 0})
			}
			changed, err := s.MarkFailed(ctx, "r", failures)
			require.NoError(t, err)
			require.Equal(t, int64(n), changed)
			st, err := s.Stats(ctx, 0)
			require.NoError(t, err)
			require.Equal(t, int64(n/2), st.Rows[outbox.StatusPermanentFailed])
			// Of the retryable half, a third was refunded: back to pending.
			require.Equal(t, int64(n/2-n/6), st.Rows[outbox.StatusFailed])
			require.Equal(t, int64(n/6), st.Rows[outbox.StatusPending])
			r := get(t, s, rows[3].ID) // refunded
			require.Equal(t, "pending", r.Status)
			require.Zero(t, r.Attempts)
			require.Equal(t, "e3", r.LastError.String)
			r = get(t, s, rows[1].ID)
			require.Equal(t, 1, r.Attempts)

			// Row 1 is claimed again (attempt 2); a batch carries a stale mark
			// of attempt 1 before the live one for the same id.
			require.NoError(t, setAvailable(s, rows[1].ID))
			again, err := s.Claim(ctx, "r", 1)
			require.NoError(t, err)
			require.Len(t, again, 1)
			require.Equal(t, rows[1].ID, again[0].ID)
			require.Equal(t, 2, again[0].Attempt)
			changed, err = s.MarkDone(ctx, "r", []outbox.Done{
				{ID: rows[1].ID, Attempt: 1, Stream: "S", Seq: 1},
				{ID: rows[1].ID, Attempt: 2, Stream: "S", Seq: 2},
			}, false)
			require.NoError(t, err)
			require.Equal(t, int64(1), changed)
			require.Equal(t, "done", get(t, s, rows[1].ID).Status)
			var seq int64
			require.NoError(t, s.DB().SQL.QueryRow("SELECT stream_seq FROM "+s.Table()+" WHERE id = "+itoa(int(rows[1].ID))).Scan(&seq))
			require.Equal(t, int64(2), seq)

			n2, err := s.RetryDead(ctx, []int64{rows[0].ID, rows[2].ID, rows[1].ID})
			require.NoError(t, err)
			require.Equal(t, 2, n2, "two dead letters; the done row stays done")
		})
	}
}

func setAvailable(s *outbox.Store, id int64) error {
	_, err := s.DB().SQL.Exec("UPDATE " + s.Table() + " SET available_at = created_at WHERE id = " + itoa(int(id)))
	return err
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestMySQLClaimPlanWithManyDoneRows loads 200,000 relayed rows and 2,000
// queued ones (half of them behind 50 ordering keys), then prints the plan
// of the claim's candidate query: it must not scan the table or an index
// from end to end, whatever the number of relayed rows. Durations are
// logged, not asserted.
func TestMySQLClaimPlanWithManyDoneRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "mysql")
	db := s.DB().SQL
	n, from := mysqlSeries()
	for batch := range 2 {
		_, err := db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload, ordering_key, status, attempts, relayed_at, stream, stream_seq)
			SELECT CONCAT('done-`+itoa(batch)+`-', `+n+`), 'events.x', '', IF(`+n+` % 2 = 0, CONCAT('k', `+n+` % 50), NULL), 'done', 1, UTC_TIMESTAMP(6), 'EVENTS', `+n+from)
		require.NoError(t, err)
	}
	_, err := db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload, ordering_key)
		SELECT CONCAT('pending-', `+n+`), 'events.x', '', IF(`+n+` % 2 = 0, CONCAT('k', `+n+` % 50), NULL)`+from+` WHERE `+n+` < 2000`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE TABLE "+s.Table())
	require.NoError(t, err)

	q, ok := outbox.MySQLCandidatesSQL(s.Table())
	require.True(t, ok)
	plan, _ := mysqlExplain(t, db, q, outbox.MySQLCandidatesArgs("", 1000)...)
	t.Logf("candidates with 200,000 done rows:\n%s", plan)

	for range 3 {
		start := time.Now()
		claimed, err := s.Claim(ctx, "plan-test", 500)
		require.NoError(t, err)
		require.NotEmpty(t, claimed)
		t.Logf("claimed %d rows in %s", len(claimed), time.Since(start))
	}
}

// TestMySQLBinlogStatementsReadByPrimaryKey: the mysql-binlog source's
// statements on a batch of rows read them by primary key, however small the
// table. On a table of 400 rows MariaDB read every row for the status read
// of a batch of 100 (type ALL), and its shared locks waited for the marks'
// transaction (row locks on the rows it marks): a mark held up held every
// batch behind it, the marker's queue notwithstanding (a saboteur).
func TestMySQLBinlogStatementsReadByPrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "mysql")
	db := s.DB().SQL
	n, from := mysqlSeries()
	_, err := db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload)
		SELECT CONCAT('k-', `+n+`), 'events.x', ''`+from+` WHERE `+n+` < 400`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE TABLE "+s.Table())
	require.NoError(t, err)
	var ids []int64
	rows, err := db.QueryContext(ctx, "SELECT id FROM "+s.Table()+" ORDER BY id LIMIT 100 OFFSET 150")
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	q, ok := s.BinlogStatements()
	require.True(t, ok)
	idArgs := make([]any, len(ids))
	for i, id := range ids {
		idArgs[i] = id
	}
	arms := func(value any) []any {
		var out []any
		for _, id := range ids {
			out = append(out, id, value)
		}
		return out
	}
	keys := func() []any {
		var out []any
		for _, id := range ids {
			out = append(out, id, "k-"+strconv.FormatInt(id, 10))
		}
		return out
	}
	for name, stmt := range map[string]struct {
		query string
		args  []any
	}{
		"status read": {q.Statuses, idArgs},
		"reread":      {q.Reread, slices.Concat([]any{1 << 20}, idArgs)},
		"mark done":   {q.MarkDone, slices.Concat(arms("EVENTS"), arms(1), arms(1), idArgs, keys())},
		"mark failed": {q.MarkFailed, slices.Concat(arms("failed"), arms("x"), arms(1), arms(1000), idArgs, keys())},
		"delete done": {q.DeleteDone, slices.Concat(idArgs, keys())},
	} {
		_, lines := mysqlExplain(t, db, outbox.ExpandMySQL(stmt.query, len(ids)), stmt.args...)
		require.NotEmpty(t, lines, name)
		for _, line := range lines {
			require.Equal(t, "PRIMARY", line["key"], "%s: %v", name, line)
		}
	}
}

// TestMySQLRequeueSkipsALockedLease: in-flight recovery must not wait for
// a stale row that another transaction holds (a relay paused in the middle
// of its mark or claim), nor stop for it: it requeues the other stale rows
// at once and the locked one once it is free. Its earlier form, one UPDATE
// over a derived table of stale rows, took shared locks on MariaDB 10.11
// and waited innodb_lock_wait_timeout (50 s) behind such a relay on every
// claim, so no relay claimed anything.
func TestMySQLRequeueSkipsALockedLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "mysql")
	a := enqueue(t, s, "a", "")
	b := enqueue(t, s, "b", "")
	require.Len(t, claimIDs(t, s, "frozen"), 2)
	db := s.DB().SQL
	_, err := db.ExecContext(ctx, "UPDATE "+s.Table()+" SET claimed_at = claimed_at - INTERVAL 1 HOUR")
	require.NoError(t, err)

	holder, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer holder.Rollback()
	var id int64
	require.NoError(t, holder.QueryRowContext(ctx, "SELECT id FROM "+s.Table()+" WHERE id = ? FOR UPDATE", a).Scan(&id))

	// A lock wait would end with an error long before this deadline is
	// reached only if innodb_lock_wait_timeout were short; the default is
	// 50 s.
	within, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	n, err := s.RequeueInflightOlderThan(within, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the stale row nobody holds is requeued")
	require.Equal(t, "failed", get(t, s, b).Status)
	require.Equal(t, "in_flight", get(t, s, a).Status, "the held row is skipped, not waited for")

	require.NoError(t, holder.Rollback())
	n, err = s.RequeueInflightOlderThan(ctx, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "failed", get(t, s, a).Status)
}

// mysqlSeries is a number expression n and a FROM clause over which it
// takes each value 0 to 99,999 once (MariaDB caps recursive CTEs at 1,000
// iterations by default).
// mysqlExplain returns the plan of query with args, as text and as one
// map per line (EXPLAIN's column names to values), and fails the test
// when a base table is read from end to end (type ALL or index).
func mysqlExplain(t *testing.T, db *sql.DB, query string, args ...any) (string, []map[string]string) {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN "+query, args...)
	require.NoError(t, err)
	cols, err := rows.Columns()
	require.NoError(t, err)
	lines := mysqlLines(t, rows)
	var plan strings.Builder
	plan.WriteString(strings.Join(cols, "\t") + "\n")
	for _, line := range lines {
		for _, c := range cols {
			plan.WriteString(line[c] + "\t")
		}
		plan.WriteString("\n")
	}
	for _, line := range lines {
		if !strings.HasPrefix(line["table"], "<") { // a base table, not a derived one
			require.NotContains(t, []string{"ALL", "index"}, line["type"], "full scan of %s:\n%s", line["table"], plan.String())
		}
	}
	return plan.String(), lines
}

// mysqlLines reads every row of rows, whatever its columns, as a map of
// column name to value (NULL as ""), and closes rows.
func mysqlLines(t *testing.T, rows *sql.Rows) []map[string]string {
	t.Helper()
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var lines []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		line := map[string]string{}
		for i, c := range cols {
			line[c] = vals[i].String
		}
		lines = append(lines, line)
	}
	require.NoError(t, rows.Err())
	return lines
}

// TestMySQLStatusChangesRewriteFewIndexes: on MySQL and MariaDB every index
// led by status is rewritten when a row's status changes. The table keeps
// one (claimable: the claim, in-flight recovery, the stall check) and
// indexes relayed rows by relayed_at alone, which only the mark writes: a
// claim rewrites one index entry, a mark two, an insert writes four
// (primary key, idempotency key, claimable, relayed); migration 00002
// dropped the lease and done indexes of 00001, whose claims and marks
// rewrote three entries each. With 200,000 relayed rows, in-flight
// recovery and retention still read no index or table from end to end,
// and find their rows.
func TestMySQLStatusChangesRewriteFewIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "mysql")
	db := s.DB().SQL
	table := s.Table()
	rows, err := db.QueryContext(ctx, "SHOW INDEX FROM "+table)
	require.NoError(t, err)
	var indexes []string
	for _, line := range mysqlLines(t, rows) {
		if !slices.Contains(indexes, line["Key_name"]) {
			indexes = append(indexes, line["Key_name"])
		}
	}
	slices.Sort(indexes)
	require.Equal(t, []string{"PRIMARY", "claimable_idx", "idempotency_key_idx", "relayed_idx"}, indexes)

	n, from := mysqlSeries()
	for batch := range 2 {
		_, err := db.ExecContext(ctx, `INSERT INTO `+table+` (idempotency_key, subject, payload, ordering_key, status, attempts, relayed_at, stream, stream_seq)
			SELECT CONCAT('done-`+itoa(batch)+`-', `+n+`), 'events.x', '', IF(`+n+` % 2 = 0, CONCAT('k', `+n+` % 50), NULL), 'done', 1, UTC_TIMESTAMP(6), 'EVENTS', `+n+from)
		require.NoError(t, err)
	}
	_, err = db.ExecContext(ctx, `INSERT INTO `+table+` (idempotency_key, subject, payload, status, attempts, relayed_at, stream, stream_seq)
		SELECT CONCAT('old-', `+n+`), 'events.x', '', 'done', 1, UTC_TIMESTAMP(6) - INTERVAL 2 DAY, 'EVENTS', `+n+from+` WHERE `+n+` < 100`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO `+table+` (idempotency_key, subject, payload, status, attempts, owner, claimed_at, first_claimed_at)
		SELECT CONCAT('leased-', `+n+`), 'events.x', '', 'in_flight', 1, 'gone', UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR`+from+` WHERE `+n+` < 20`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE TABLE "+table)
	require.NoError(t, err)

	stale, purge, ok := outbox.MySQLMaintenanceSQL(table)
	require.True(t, ok)
	day := int64(24 * time.Hour / time.Microsecond)
	for name, c := range map[string]struct {
		query string
		args  []any
		index string
	}{
		"in-flight recovery": {stale, []any{int64(time.Minute / time.Microsecond), 500}, "claimable_idx"},
		"retention":          {purge, []any{day, 1000}, "relayed_idx"},
	} {
		plan, lines := mysqlExplain(t, db, c.query, c.args...)
		t.Logf("%s with 200,000 relayed rows:\n%s", name, plan)
		require.Equal(t, c.index, lines[0]["key"], "%s reads %s", name, c.index)
	}
	requeued, err := s.RequeueInflightOlderThan(ctx, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 20, requeued, "every stale lease requeued")
	purged, err := s.PurgeDoneOlderThan(ctx, 24*time.Hour, 1000)
	require.NoError(t, err)
	require.Equal(t, 100, purged, "the rows relayed before the cutoff deleted, no other")
}

func mysqlSeries() (n, from string) {
	digits := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	return "(a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d)",
		" FROM " + digits + " a, " + digits + " b, " + digits + " c, " + digits + " e, " + digits + " f"
}

// TestMySQLClaimReadsOnlyTheHeadsOfOrderingKeys: the candidate query reads
// a bounded window of keys from the key cursor, whatever the number of
// keys or of rows behind them. Counted from the session's Handler_read_*
// counters (index and row reads by the storage engine, temporary tables
// left out), for the claim of 500 rows (1,000 candidates):
//   - 20 keys with 500 rows each: a scan that did not skip to the next key
//     reads the 10,000 rows;
//   - 50,000 keys with one row each: the claim before this one, MIN(id) per
//     (status, key) over every key, read them all on every claim (0.8 s per
//     claim with 100,000 keys, about 600 rows/s).
func TestMySQLClaimReadsOnlyTheHeadsOfOrderingKeys(t *testing.T) {
	t.Parallel()
	const want = 2 * 500 // mysqlOverfetch × the default batch
	for _, shape := range []struct {
		name       string
		keys, rows int
		maxReads   int
	}{
		{"20 keys of 500 rows", 20, 10_000, 25 * 20},
		{"50,000 keys of one row", 50_000, 50_000, 15 * want},
	} {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, "mysql")
			db := s.DB().SQL
			n, from := mysqlSeries()
			_, err := db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload, ordering_key)
				SELECT CONCAT('k-', `+n+`), 'events.x', '', CONCAT('key-', `+n+` % ?)`+from+` WHERE `+n+` < ?`, shape.keys, shape.rows)
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "ANALYZE TABLE "+s.Table())
			require.NoError(t, err)

			q, ok := outbox.MySQLCandidatesSQL(s.Table())
			require.True(t, ok)
			conn, err := db.Conn(ctx)
			require.NoError(t, err)
			defer conn.Close()
			before := handlerReads(t, conn)
			ids, err := conn.QueryContext(ctx, q, outbox.MySQLCandidatesArgs("", want)...)
			require.NoError(t, err)
			got := 0
			for ids.Next() {
				got++
			}
			require.NoError(t, ids.Err())
			reads := handlerReads(t, conn) - before
			t.Logf("%s: %d candidates, %d index and row reads", shape.name, got, reads)
			require.Equal(t, min(shape.keys, want), got, "one candidate per key, up to the window")
			require.Less(t, reads, shape.maxReads, "the candidates read a window of keys and the head of each, not the rows behind the heads nor every key")

			rows, err := s.Claim(ctx, "relay", 500)
			require.NoError(t, err)
			require.Len(t, rows, min(shape.keys, 500))
			for _, r := range rows {
				require.Less(t, r.ID, int64(shape.keys+1), "row %d is not the first of its key", r.ID)
			}
		})
	}
}

// handlerReads is the sum of the session's Handler_read_* counters but
// Handler_read_rnd_next, which counts reads of temporary tables too.
func handlerReads(t *testing.T, conn *sql.Conn) int {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), "SHOW SESSION STATUS LIKE 'Handler_read%'")
	require.NoError(t, err)
	defer rows.Close()
	sum := 0
	for rows.Next() {
		var name string
		var v int
		require.NoError(t, rows.Scan(&name, &v))
		if name != "Handler_read_rnd_next" {
			sum += v
		}
	}
	require.NoError(t, rows.Err())
	return sum
}

// TestMySQLCandidatesRunAgainAsAPreparedStatement: one form of the key walk
// (a derived table of keys inside another) failed on MariaDB 10.11 from its
// second execution as a prepared statement with "Unknown column 'w.k'".
// The relay's sessions write arguments into the statement's text
// (interpolateParams), but a URL that names a charset or collation has
// them prepared again; this keeps the query safe to prepare once.
func TestMySQLCandidatesRunAgainAsAPreparedStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "mysql")
	enqueue(t, s, "a", "key-a")
	enqueue(t, s, "b", "")
	q, ok := outbox.MySQLCandidatesSQL(s.Table())
	require.True(t, ok)
	conn, err := s.DB().SQL.Conn(ctx) // one connection: one server-side statement
	require.NoError(t, err)
	defer conn.Close()
	stmt, err := conn.PrepareContext(ctx, q)
	require.NoError(t, err)
	defer stmt.Close()
	for i := range 3 {
		rows, err := stmt.QueryContext(ctx, outbox.MySQLCandidatesArgs("", 10)...)
		require.NoError(t, err, "execution %d", i+1)
		n := 0
		for rows.Next() {
			n++
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		require.Equal(t, 2, n, "execution %d: the row without key and the head of key-a", i+1)
	}
}

// TestMySQLDriverLogsThroughSlog: the driver's own line for a session
// killed under it comes to the relay's logger (component mysql-driver),
// not to stderr as "[mysql] …". Not parallel: the driver's logger is the
// process's.
func TestMySQLDriverLogsThroughSlog(t *testing.T) {
	var logs bridgetest.SyncBuffer
	outbox.LogMySQLDriver(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { outbox.LogMySQLDriver(slog.New(slog.NewTextHandler(os.Stderr, nil))) })
	ctx := context.Background()
	s := setup(t, "mysql") // opened after: its sessions take the logger
	conn, err := s.DB().SQL.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var id int64
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id))
	_, err = s.DB().SQL.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10))
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	_ = conn.QueryRowContext(ctx, "SELECT 1").Scan(new(int))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "component=mysql-driver") }, 5*time.Second, 50*time.Millisecond,
		"no driver line came through: %q", logs.String())
	require.Contains(t, logs.String(), "level=WARN")
}

// TestMySQLRelaySendsEachStatementOnce: the relay's sessions write a
// statement's arguments into its text (interpolateParams), so that a claim
// and a mark are one packet each, not a server-side prepare, an execute and
// a close. Counted by the session's Com_stmt_prepare on a pool of one
// session.
func TestMySQLRelaySendsEachStatementOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "mysql")
	s.DB().SQL.SetMaxOpenConns(1) // every statement below on one session
	prepared := func() int64 { return sessionStatus(t, s, "Com_stmt_prepare") }
	before := prepared()
	enqueue(t, s, "a", "")
	enqueue(t, s, "b", "key")
	rows, err := s.Claim(ctx, "relay-1", 10)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	done := []outbox.Done{{ID: rows[0].ID, Attempt: rows[0].Attempt, Stream: "EVENTS", Seq: 1}, {ID: rows[1].ID, Attempt: rows[1].Attempt, Stream: "EVENTS", Seq: 2}}
	changed, err := s.MarkDone(ctx, "relay-1", done, false)
	require.NoError(t, err)
	require.Equal(t, int64(2), changed)
	require.Equal(t, before, prepared(), "no statement was prepared on the server")
	require.Equal(t, "interpolated", s.DB().Statements())
}

// TestMySQLArgumentsKeepEveryByte: with the arguments written into the
// statement's text, a row comes back as it went in — quotes, backslashes,
// placeholders and comment markers in its keys, header and owner, every
// byte value (NUL and Ctrl-Z among them) in its payload — in the relay's
// default sql_mode and under NO_BACKSLASH_ESCAPES, where a backslash is an
// ordinary character.
func TestMySQLArgumentsKeepEveryByte(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hostile := "a'b\"c\\d?g-- h/*i*/#j k`l\\'m''n\\\\o _binary'p' é😀"
	payload := make([]byte, 0, 512)
	for i := range 512 {
		payload = append(payload, byte(i))
	}
	for _, mode := range []string{"", "NO_BACKSLASH_ESCAPES,STRICT_ALL_TABLES"} {
		t.Run("sql_mode="+mode, func(t *testing.T) {
			t.Parallel()
			url, table, _ := bridgetest.Outbox(t, "mysql")
			if mode != "" {
				sep := "?"
				if strings.Contains(url, "?") {
					sep = "&"
				}
				url += sep + "sql_mode=%27" + strings.ReplaceAll(mode, ",", "%2C") + "%27"
			}
			db, err := outbox.Open(ctx, url)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			s, err := outbox.NewStore(db, table)
			require.NoError(t, err)
			var got string
			require.NoError(t, db.SQL.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&got))
			require.Equal(t, mode != "", strings.Contains(got, "NO_BACKSLASH_ESCAPES"), "session sql_mode %q", got)

			headers := `{"X-Hostile":["` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(hostile) + `"]}`
			id, err := s.Enqueue(ctx, outbox.Entry{IdempotencyKey: hostile, Subject: "events.t", Payload: payload, Headers: []byte(headers), OrderingKey: hostile})
			require.NoError(t, err)
			_, err = s.Enqueue(ctx, outbox.Entry{IdempotencyKey: hostile, Subject: "events.t"})
			require.ErrorIs(t, err, outbox.ErrAlreadyEnqueued, "the key is found again byte for byte")
			owner := "relay-" + hostile
			rows, err := s.Claim(ctx, owner, 10)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			r := rows[0]
			require.Equal(t, id, r.ID)
			require.Equal(t, hostile, r.IdempotencyKey)
			require.Equal(t, hostile, r.OrderingKey.String)
			require.Equal(t, payload, r.Payload)
			require.JSONEq(t, headers, string(r.Headers))
			changed, err := s.MarkDone(ctx, owner, []outbox.Done{{ID: r.ID, Attempt: r.Attempt, Stream: "S'\\", Seq: 7}}, false)
			require.NoError(t, err)
			require.Equal(t, int64(1), changed, "the mark's fence matched the owner byte for byte")
			var stream string
			require.NoError(t, db.SQL.QueryRowContext(ctx, "SELECT stream FROM "+s.Table()+" WHERE id = ?", id).Scan(&stream))
			require.Equal(t, "S'\\", stream)
		})
	}
}

// TestMySQLIdleRelayStatements: on a table with nothing to claim or
// requeue, a claim and an in-flight recovery are one statement each, not
// a transaction of four (SET TRANSACTION, START TRANSACTION, the read,
// COMMIT): an idle relay polls every table all day. Counted by the
// session's Questions on a pool of one session.
func TestMySQLIdleRelayStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "mysql")
	s.DB().SQL.SetMaxOpenConns(1)
	questions := func() int64 { return sessionStatus(t, s, "Questions") }
	before := questions()
	require.Equal(t, before+1, questions(), "reading the count is one statement")
	before = questions()
	rows, err := s.Claim(ctx, "relay-1", 10)
	require.NoError(t, err)
	require.Empty(t, rows)
	n, err := s.RequeueInflightOlderThan(ctx, time.Minute)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, before+1+2, questions(), "one statement for the claim, one for the recovery")

	// With work, they still claim and requeue.
	enqueue(t, s, "a", "")
	rows, err = s.Claim(ctx, "relay-1", 10)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	n, err = s.RequeueInflightOlderThan(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "failed", get(t, s, rows[0].ID).Status, "requeued: failed, claimable now")
}

// TestMySQLPayloadTwiceItsSizeEscaped: a payload of NUL bytes is escaped
// to twice its size when written into the statement; one of 60 % of the
// server's max_allowed_packet would not fit, and is sent as a prepared
// statement's argument instead (the driver knows the server's limit).
func TestMySQLPayloadTwiceItsSizeEscaped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "mysql")
	var maxPacket int
	require.NoError(t, s.DB().SQL.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&maxPacket))
	size := min(maxPacket*6/10, 64<<20)
	payload := make([]byte, size) // NUL bytes: escaped as \0
	id, err := s.Enqueue(ctx, outbox.Entry{IdempotencyKey: "big", Subject: "events.t", Payload: payload})
	require.NoError(t, err, "a payload of %d bytes under max_allowed_packet %d", size, maxPacket)
	var n int
	require.NoError(t, s.DB().SQL.QueryRowContext(ctx, "SELECT LENGTH(payload) FROM "+s.Table()+" WHERE id = ? AND payload = REPEAT(CHAR(0), ?)", id, size).Scan(&n))
	require.Equal(t, size, n)
}

// sessionStatus reads a counter of SHOW SESSION STATUS on a session of s's
// pool (the tests above keep a pool of one session).
func sessionStatus(t *testing.T, s *outbox.Store, variable string) int64 {
	t.Helper()
	var name string
	var n int64
	require.NoError(t, s.DB().SQL.QueryRow("SHOW SESSION STATUS LIKE ?", variable).Scan(&name, &n))
	return n
}
