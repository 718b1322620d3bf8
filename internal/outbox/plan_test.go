package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestClaimPlanWithMillionsOfDoneRows loads 5,000,000 relayed rows and
// 2,000 pending ones, then prints EXPLAIN ANALYZE of the claim. The claim
// must read the partial indexes of claimable rows, whatever the number of
// relayed rows: a scan over them was the 37 ms vs 0.04 ms difference
// reported against another outbox library. Its duration is reported in
// docs/BENCHMARKS.md, not asserted.
func TestClaimPlanWithMillionsOfDoneRows(t *testing.T) {
	t.Parallel()
	const done, pending = 5_000_000, 2000
	s := setup(t, "postgres")
	ctx := context.Background()
	db := s.DB().SQL
	_, err := db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload, status, attempts, relayed_at, stream, stream_seq)
		SELECT 'done-' || g, 'events.x', '\x'::bytea, 'done', 1, now(), 'EVENTS', g FROM generate_series(1, $1::int) g`, done)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload)
		SELECT 'pending-' || g, 'events.x', '\x'::bytea FROM generate_series(1, $1::int) g`, pending)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE "+s.Table())
	require.NoError(t, err)

	// Cold, then warm; a batch of 500 (the default) and of 10; then 10
	// again after VACUUM has removed the index entries of the rows claimed
	// so far, which the claims before it skip.
	for _, run := range []struct{ name, limit string }{{"cold, 500 rows", "500"}, {"warm, 500 rows", "500"}, {"warm, 10 rows", "10"}, {"vacuumed, 10 rows", "10"}} {
		if run.name == "vacuumed, 10 rows" {
			_, err := db.ExecContext(ctx, "VACUUM "+s.Table())
			require.NoError(t, err)
		}
		plan := explain(t, db, claimSQL(t, s.Table(), run.limit))
		t.Logf("claim (%s) with %d done rows in the table:\n%s", run.name, done, plan)
		require.Contains(t, plan, "outbox_unordered_idx", "the claim reads the partial index of claimable rows without an ordering key")
		require.NotContains(t, plan, "Seq Scan", "the claim never scans the table")
	}
}

func explain(t *testing.T, db *sql.DB, query string) string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN (ANALYZE, BUFFERS) "+query)
	require.NoError(t, err)
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	return plan.String()
}

// claimSQL is the PostgreSQL claim statement of table, as the store runs
// it, with owner "plan-test", the given limit, the key cursor at the start
// and the default byte bound and a max_payload of 1 MiB.
func claimSQL(t *testing.T, table, limit string) string {
	t.Helper()
	sqlText, ok := outbox.PostgresClaimSQL(table)
	require.True(t, ok)
	n, err := strconv.Atoi(limit)
	require.NoError(t, err)
	window := strconv.Itoa(4 * n) // keyWindow
	return strings.NewReplacer("$1", "'plan-test'", "$2", limit, "$3", "''", "$4", window,
		"$5", strconv.FormatInt(int64(config.MaxInFlightBytesDefault), 10), "$6", strconv.Itoa(1<<20)).Replace(sqlText)
}

// TestClaimReadsOnlyTheHeadsOfOrderingKeys: with 10,000 rows queued behind
// 20 ordering keys, the claim reads the first unsettled row of each key and
// none of the rows behind it. A claim that walked the backlog in id order
// read all 10,000 per claim (112 ms for 40 rows out of 10,000 with 40
// keys), so a backlog drained in quadratic time. Counted from EXPLAIN
// ANALYZE: the rows every scan of the table returned or filtered out.
func TestClaimReadsOnlyTheHeadsOfOrderingKeys(t *testing.T) {
	t.Parallel()
	const keys, perKey = 20, 500
	s := setup(t, "postgres")
	ctx := context.Background()
	db := s.DB().SQL
	_, err := db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload, ordering_key)
		SELECT 'k-' || g, 'events.x', '\x'::bytea, 'key-' || (g % $1::int) FROM generate_series(1, $2::int) g`, keys, keys*perKey)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE "+s.Table())
	require.NoError(t, err)

	rows, err := s.Claim(ctx, "relay", 500)
	require.NoError(t, err)
	require.Len(t, rows, keys, "one row per key: the first of each")
	for _, r := range rows {
		require.LessOrEqual(t, r.ID, int64(keys), "row %d is not the first of its key", r.ID)
	}

	// Now every key's head is in flight: nothing is claimable, and finding
	// that out reads the 20 heads, not the 9,980 rows behind them.
	var plan []map[string]any
	var raw []byte
	require.NoError(t, db.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+claimSQL(t, s.Table(), "500")).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &plan))
	read := rowsRead(plan[0]["Plan"].(map[string]any))
	t.Logf("rows read by a claim with every key's head in flight: %d", read)
	require.Less(t, read, 5*keys, "the claim reads the heads of the keys, not the backlog behind them")

	// So does the probe that runs after a claim that was not full (and
	// the stall watch): it finds that no row is claimable from the heads.
	stalled, _, ok := outbox.PostgresReadSQL(s.Table())
	require.True(t, ok)
	claimable, err := s.Stalled(ctx, 0)
	require.NoError(t, err)
	require.False(t, claimable, "every key's head is in flight")
	require.NoError(t, db.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+strings.ReplaceAll(stalled, "$1", "0")).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &plan))
	read = rowsRead(plan[0]["Plan"].(map[string]any))
	t.Logf("rows read by the claimable probe with every key's head in flight: %d", read)
	require.Less(t, read, 5*keys, "the probe reads the heads of the keys, not the backlog behind them")
	_, err = db.ExecContext(ctx, `UPDATE `+s.Table()+` SET status = 'done' WHERE id = 7`)
	require.NoError(t, err)
	claimable, err = s.Stalled(ctx, 0)
	require.NoError(t, err)
	require.True(t, claimable, "the next row of key 7 is its head now, and claimable")
}

// rowsRead sums, over the scans of a plan, the rows returned and the rows
// removed by a filter, times the loops.
func rowsRead(node map[string]any) int {
	n := 0
	if _, ok := node["Relation Name"]; ok {
		loops := node["Actual Loops"].(float64)
		removed, _ := node["Rows Removed by Filter"].(float64)
		n += int((node["Actual Rows"].(float64) + removed) * loops)
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		n += rowsRead(c.(map[string]any))
	}
	return n
}

// TestClaimGivesEveryOrderingKeyItsTurn: when more keys have a claimable
// row than a claim takes, the next claim goes on after the last key
// claimed rather than starting again from the first key, so no key waits
// behind keys that keep having rows.
func TestClaimGivesEveryOrderingKeyItsTurn(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const keys, perKey, limit = 10, 5, 3
			s := setup(t, kind)
			ctx := context.Background()
			for i := range perKey {
				for k := range keys {
					enqueue(t, s, fmt.Sprintf("k%d-%d", k, i), fmt.Sprintf("key-%d", k))
				}
			}
			served := map[string]bool{}
			for range (keys + limit - 1) / limit {
				rows, err := s.Claim(ctx, "relay", limit)
				require.NoError(t, err)
				require.Len(t, rows, limit)
				var done []outbox.Done
				for _, r := range rows {
					served[r.OrderingKey.String] = true
					done = append(done, outbox.Done{ID: r.ID, Attempt: r.Attempt, Stream: "S", Seq: uint64(r.ID)})
				}
				n, err := s.MarkDone(ctx, "relay", done, false)
				require.NoError(t, err)
				require.EqualValues(t, limit, n)
			}
			require.Len(t, served, keys, "every key had a row claimed within %d claims of %d rows: %v", (keys+limit-1)/limit, limit, served)
		})
	}
}

// TestSQLiteClaimWalksKeysLazily: SQLite must run the walk over ordering
// keys as a co-routine, which stops once the claim has its rows. Planned as
// a materialized CTE (what SQLite 3.54 chose without the NOT MATERIALIZED
// hint), every claim walked every key first: 100 ms claims and a third of
// the throughput with 100,000 keys.
func TestSQLiteClaimWalksKeysLazily(t *testing.T) {
	t.Parallel()
	s := setup(t, "sqlite")
	q, ok := outbox.SQLiteClaimSQL(s.Table())
	require.True(t, ok)
	rows, err := s.DB().SQL.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, "plan-test", 500, "", 2000, int64(config.MaxInFlightBytesDefault), 1<<20)
	require.NoError(t, err)
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		plan.WriteString(detail + "\n")
	}
	require.NoError(t, rows.Err())
	t.Logf("SQLite claim plan:\n%s", plan.String())
	for _, cte := range []string{"after_cursor", "up_to_cursor"} {
		require.Contains(t, plan.String(), "CO-ROUTINE "+cte)
		require.NotContains(t, plan.String(), "MATERIALIZE "+cte)
	}
	require.Contains(t, plan.String(), "outbox_unordered_idx")
}

// TestClaimPassesKeysThatAreHeldBack: keys whose head is held back (in
// flight here; a failed row waiting out its backoff is the same) must not
// keep the claim from the keys after them, however many they are. Every
// database looks at a window of keys from the key cursor per claim (MySQL
// twice the claim's rows, the others keyWindow per lap); a window of
// held-back keys once left the cursor where it was, and the keys after it
// waited for the held-back ones.
func TestClaimPassesKeysThatAreHeldBack(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const held, limit = 10, 2
			s := setup(t, kind)
			ctx := context.Background()
			for k := range held {
				enqueue(t, s, fmt.Sprintf("a%d-1", k), fmt.Sprintf("a-%02d", k))
				enqueue(t, s, fmt.Sprintf("a%d-2", k), fmt.Sprintf("a-%02d", k))
			}
			holdHeads(t, s, held)
			enqueue(t, s, "b1", "b-1")
			enqueue(t, s, "b2", "b-2")

			var got []string
			for range held / limit {
				rows, err := s.Claim(ctx, "relay", limit)
				require.NoError(t, err)
				for _, r := range rows {
					got = append(got, r.OrderingKey.String)
				}
				if len(got) > 0 {
					break
				}
			}
			require.ElementsMatch(t, []string{"b-1", "b-2"}, got, "the rows of keys after %d held-back keys are claimed within %d claims of %d rows", held, held/limit, limit)
		})
	}
}

// TestClaimGivesANewKeyItsTurnAmongRetryingKeys: keys whose heads fail and
// are ready again at once keep their old, small ids; a key among them
// whose head is newer (a larger id) must still be claimed within a lap of
// the keys. A stress trial found MySQL passing over such a key for minutes:
// its claim kept the ready heads with the smallest ids and then moved the
// key cursor past the key it had left out.
func TestClaimGivesANewKeyItsTurnAmongRetryingKeys(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const retrying, limit = 20, 2
			s := setup(t, kind)
			ctx := context.Background()
			for k := range retrying {
				enqueue(t, s, fmt.Sprintf("r%d", k), fmt.Sprintf("r%04d", k))
			}
			enqueue(t, s, "new", "r0010z") // sorts among them, newest id

			claims := 0
			for ; claims < 3*retrying/limit; claims++ {
				rows, err := s.Claim(ctx, "relay", limit)
				require.NoError(t, err)
				var failures []outbox.Failure
				found := false
				for _, r := range rows {
					found = found || r.OrderingKey.String == "r0010z"
					failures = append(failures, outbox.Failure{ID: r.ID, Attempt: r.Attempt, Err: "no stream"})
				}
				if found {
					break
				}
				_, err = s.MarkFailed(ctx, "relay", failures) // retryable, ready again at once
				require.NoError(t, err)
			}
			require.Less(t, claims, 3*retrying/limit, "key r0010z was not claimed within %d claims of %d rows while %d keys around it kept retrying", 3*retrying/limit, limit, retrying)
			t.Logf("claimed after %d claims", claims+1)
		})
	}
}

// TestClaimWalksABoundedWindowOfHeldBackKeys: with 1,000 keys whose heads
// are in flight, a claim of 10 rows reads a window of keys (keyWindow, 40
// per lap), not all 1,000: before the window, one claim took 1.1–1.3 s
// with 100,000 such keys (after an outage of their stream, say). Counted
// from EXPLAIN ANALYZE, as in TestClaimReadsOnlyTheHeadsOfOrderingKeys.
func TestClaimWalksABoundedWindowOfHeldBackKeys(t *testing.T) {
	t.Parallel()
	const keys = 1000
	s := setup(t, "postgres")
	ctx := context.Background()
	db := s.DB().SQL
	_, err := db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload, ordering_key)
		SELECT 'k-' || g, 'events.x', '\x'::bytea, 'key-' || (g % $1::int) FROM generate_series(1, $2::int) g`, keys, 2*keys)
	require.NoError(t, err)
	held, err := s.Claim(ctx, "other", keys)
	require.NoError(t, err)
	require.Len(t, held, keys, "every key's head is in flight")
	_, err = db.ExecContext(ctx, "ANALYZE "+s.Table())
	require.NoError(t, err)

	var plan []map[string]any
	var raw []byte
	require.NoError(t, db.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+claimSQL(t, s.Table(), "10")).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &plan))
	read := rowsRead(plan[0]["Plan"].(map[string]any))
	t.Logf("rows read by a claim of 10 with %d held-back keys: %d", keys, read)
	require.Less(t, read, 5*2*40, "the claim walks a window of keys, not every held-back key")
}

// TestClaimPassesHeldBackKeysWhileAnEarlyKeyStaysBusy: a key early in key
// order that has a new row at every claim must not keep the claim from
// walking on past a window of held-back keys to the keys after them. A
// stress trial found PostgreSQL and SQLite moving the cursor back to the
// busy key at every claim (its row was claimed in the lap from the first
// key), so the walk after the cursor never got past the held-back window.
func TestClaimPassesHeldBackKeysWhileAnEarlyKeyStaysBusy(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const held, limit, claims = 20, 2, 10
			s := setup(t, kind)
			ctx := context.Background()
			for k := range held {
				enqueue(t, s, fmt.Sprintf("h%d", k), fmt.Sprintf("h%02d", k))
			}
			holdHeads(t, s, held)
			enqueue(t, s, "a-0", "a")
			enqueue(t, s, "z", "z")

			for i := range claims {
				rows, err := s.Claim(ctx, "relay", limit)
				require.NoError(t, err)
				var done []outbox.Done
				for _, r := range rows {
					if r.OrderingKey.String == "z" {
						t.Logf("key z claimed at claim %d", i+1)
						return
					}
					done = append(done, outbox.Done{ID: r.ID, Attempt: r.Attempt, Stream: "S", Seq: uint64(r.ID)})
				}
				_, err = s.MarkDone(ctx, "relay", done, false)
				require.NoError(t, err)
				enqueue(t, s, fmt.Sprintf("a-%d", i+1), "a") // key a is busy again
			}
			t.Fatalf("key z was not claimed within %d claims of %d rows while key a stayed busy before %d held-back keys", claims, limit, held)
		})
	}
}

// holdHeads has another relay, whose key cursor is its own, claim the
// first row of each of the n ordering keys in s, and keep them in flight.
func holdHeads(t *testing.T, s *outbox.Store, n int) {
	t.Helper()
	other, err := outbox.NewStore(s.DB(), s.Table())
	require.NoError(t, err)
	heads, err := other.Claim(context.Background(), "other", n)
	require.NoError(t, err)
	require.Len(t, heads, n, "the head of every key is in flight")
}

// TestMarkPlansLookUpEachRowByPrimaryKey: every PostgreSQL mark (done,
// deleted, failed) reads each marked row by primary key, whatever the
// table's size and statistics, and reads no other row. With the array
// joined straight to the table, PostgreSQL estimated the leased rows at 1
// and, below about 30,000 rows, planned a sequential scan with every
// array element as a join filter against every in-flight row: 999,500
// rows removed by the join filter and 270 ms for a mark of 500 rows in a
// 10,000-row table. Checked from EXPLAIN (ANALYZE, FORMAT JSON) of each
// mark (500 rows, or every row in flight when fewer), planned for its
// values (a custom plan, as for a statement run in the default
// statement_mode) and without them (the generic plan a prepared statement
// may get after its fifth run), in tables of 200 to 100,000 rows with up
// to 20,000 in flight: never analyzed, analyzed before the claims
// (statistics without a row in flight) and after them.
func TestMarkPlansLookUpEachRowByPrimaryKey(t *testing.T) {
	t.Parallel()
	const owner = "plan-test"
	for _, table := range []struct{ size, inFlight int }{{200, 200}, {1000, 1000}, {10_000, 2000}, {100_000, 2000}, {100_000, 20_000}} {
		for _, stats := range []string{"never analyzed", "analyzed before the claims", "analyzed after the claims"} {
			size, marks := table.size, min(500, table.inFlight)
			t.Run(fmt.Sprintf("%d rows, %d in flight, %s", size, table.inFlight, stats), func(t *testing.T) {
				s := setup(t, "postgres")
				ctx := context.Background()
				db := s.DB().SQL
				// No autovacuum either: the statistics stay as the case says.
				_, err := db.ExecContext(ctx, "ALTER TABLE "+s.Table()+" SET (autovacuum_enabled = false)")
				require.NoError(t, err)
				_, err = db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload)
					SELECT 'p-' || g, 'events.x', convert_to(repeat('x', 256), 'UTF8') FROM generate_series(1, $1::int) g`, size)
				require.NoError(t, err)
				analyze := func() {
					_, err := db.ExecContext(ctx, "ANALYZE "+s.Table())
					require.NoError(t, err)
				}
				if stats == "analyzed before the claims" {
					analyze()
				}
				var leased []outbox.Row
				for len(leased) < table.inFlight {
					rows, err := s.Claim(ctx, owner, 500)
					require.NoError(t, err)
					require.NotEmpty(t, rows)
					leased = append(leased, rows...)
				}
				if stats == "analyzed after the claims" {
					analyze()
				}

				ids, attempts := make([]string, marks), make([]string, marks)
				for i, r := range leased[:marks] {
					ids[i], attempts[i] = strconv.FormatInt(r.ID, 10), strconv.Itoa(r.Attempt)
				}
				each := func(v string) string { return "'{" + strings.Repeat(v+",", marks-1) + v + "}'" }
				idArr, attemptArr := "'{"+strings.Join(ids, ",")+"}'", "'{"+strings.Join(attempts, ",")+"}'"
				done, del, failed, ok := outbox.PostgresMarkSQL(s.Table())
				require.True(t, ok)

				for _, mark := range []struct{ name, sql, args string }{
					{"done", done, strings.Join([]string{idArr, attemptArr, each("S"), idArr}, ", ")},
					{"deleted", del, strings.Join([]string{idArr, attemptArr}, ", ")},
					{"failed", failed, strings.Join([]string{idArr, attemptArr, each("failed"), each("nats: timeout"), each("1000000"), each("f")}, ", ")},
				} {
					for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
						plan := bridgetest.ExplainPrepared(t, db, mark.sql, mode, "'"+owner+"', "+mark.args)
						what := fmt.Sprintf("%s mark, %s", mark.name, mode)
						require.EqualValues(t, marks, plan["Plans"].([]any)[0].(map[string]any)["Actual Rows"], "%s: every row of the mark is in its lease", what)
						scans := bridgetest.RequirePrimaryKeyLookups(t, db, plan, s.Table(), marks, what)
						require.Positive(t, scans, "%s: the plan reads the table", what)
					}
				}
			})
		}
	}
}

// TestInsertWritesOnlyTheIndexesTheClaimNeeds: on PostgreSQL an inserted
// pending row without an ordering key writes three index entries (primary
// key, idempotency key, unordered), a row with one three as well (ordering
// instead of unordered): the index of claimable rows that only relays of
// an older version read is gone (migration 00005, dropped CONCURRENTLY).
// The stall check and the oldest failed row, which read it, still never
// scan the table among 200,000 relayed rows. Before 00005 the table had
// seven indexes.
func TestInsertWritesOnlyTheIndexesTheClaimNeeds(t *testing.T) {
	t.Parallel()
	s := setup(t, "postgres")
	ctx := context.Background()
	db := s.DB().SQL
	rows, err := db.QueryContext(ctx, "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = $1::regclass ORDER BY 1", s.Table())
	require.NoError(t, err)
	var indexes []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		if i := strings.LastIndex(name, "."); i >= 0 {
			name = name[i+1:]
		}
		indexes = append(indexes, name)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"outbox_done_idx", "outbox_idempotency_key_key", "outbox_inflight_idx", "outbox_ordering_idx", "outbox_pkey", "outbox_unordered_idx"}, indexes)

	_, err = db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload, status, attempts, relayed_at, stream, stream_seq)
		SELECT 'done-' || g, 'events.x', '\x'::bytea, 'done', 1, now(), 'EVENTS', g FROM generate_series(1, 200000) g`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload, ordering_key, status, attempts)
		SELECT 'failed-' || g, 'events.x', '\x'::bytea, CASE WHEN g % 2 = 0 THEN 'k' || g END, 'failed', 1 FROM generate_series(1, 50) g`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE "+s.Table())
	require.NoError(t, err)
	stalled, oldest, ok := outbox.PostgresReadSQL(s.Table())
	require.True(t, ok)
	for name, query := range map[string]string{"stall check": strings.ReplaceAll(stalled, "$1", "0"), "oldest failed": oldest} {
		plan := explain(t, db, query)
		t.Logf("%s with 200,000 done rows:\n%s", name, plan)
		require.NotContains(t, plan, "Seq Scan", "the %s never scans the table", name)
	}
}

// TestReplayReadWalksThePrimaryKey: a replay's read of the rows after an
// id is the primary key's range, in id order, under the generic plan a
// prepared statement gets, even with statistics read while every row was
// pending (the table then relayed, not analyzed again): with status =
// 'done' in the statement the planner took the partial index of done rows,
// which it believed empty, and sorted every done row for each batch
// (.ci/replay-bench: 4.6 s per batch of 500 in 1,000,000 rows).
func TestReplayReadWalksThePrimaryKey(t *testing.T) {
	t.Parallel()
	s := setup(t, "postgres")
	ctx := context.Background()
	db := s.DB().SQL
	_, err := db.ExecContext(ctx, `INSERT INTO `+s.Table()+` (idempotency_key, subject, payload)
		SELECT 'k-' || g, 'events.x', '\x'::bytea FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE "+s.Table())
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `UPDATE `+s.Table()+` SET status = 'done', relayed_at = now(), stream = 'EVENTS', stream_seq = id`)
	require.NoError(t, err)

	query, ok := outbox.PostgresReplayReadSQL(s.Table())
	require.True(t, ok)
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	for _, q := range []string{"SET plan_cache_mode = force_generic_plan",
		"PREPARE replay_read(bigint, bigint, text, text, text, text, text, text, int) AS " + query} {
		_, err := conn.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	rows, err := conn.QueryContext(ctx, `EXPLAIN (ANALYZE) EXECUTE replay_read(10000, 9223372036854775807,
		'1970-01-01T00:00:00.000000Z', '9999-12-31T00:00:00.000000Z', NULL, NULL, NULL, NULL, 500)`)
	require.NoError(t, err)
	var plan strings.Builder
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	rows.Close()
	t.Logf("replay read of 500 rows after id 10000 of 20000 done rows:\n%s", plan.String())
	require.Contains(t, plan.String(), "_pkey", "the primary key's range")
	require.NotContains(t, plan.String(), "Sort", "in id order, not sorted")
}
