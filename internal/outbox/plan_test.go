package outbox_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestClaimPlanWithMillionsOfDoneRows loads 5,000,000 relayed rows and
// 2,000 pending ones, then prints EXPLAIN ANALYZE of the claim. The claim
// must read the partial index of claimable rows, whatever the number of
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

	// Cold, then warm; a batch of 500 (the default) and of 10.
	for _, run := range []struct{ name, limit string }{{"cold, 500 rows", "500"}, {"warm, 500 rows", "500"}, {"warm, 10 rows", "10"}} {
		plan := explain(t, db, strings.Replace(strings.Replace(claimSQL(t, s.Table()), "$1", "'plan-test'", 1), "$2", run.limit, 1))
		t.Logf("claim (%s) with %d done rows in the table:\n%s", run.name, done, plan)
		require.Contains(t, plan, "outbox_claimable_idx", "the claim reads the partial index of claimable rows")
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

// claimSQL is the PostgreSQL claim statement of table, as the store runs it.
func claimSQL(t *testing.T, table string) string {
	t.Helper()
	sqlText, ok := outbox.PostgresClaimSQL(table)
	require.True(t, ok)
	return sqlText
}
