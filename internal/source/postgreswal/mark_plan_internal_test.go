package postgreswal

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestMarkPlansLookUpEachRowByPrimaryKey: every mark of the postgres-wal
// source (done, deleted, dead, failed) reads each marked row by primary
// key, whatever the table's size and statistics, and reads no other row.
// With the array joined straight to the table, PostgreSQL read the whole
// table for a mark of 500 rows in tables of 200 to 10,000 rows. Checked
// from EXPLAIN (ANALYZE, FORMAT JSON) of each mark, planned for its values
// and without them (bridgetest.ExplainPrepared), in tables of pending rows,
// never analyzed and analyzed. It needs BRIDGE_TEST_POSTGRES_URL, not the
// logical server: the statements are plain SQL.
func TestMarkPlansLookUpEachRowByPrimaryKey(t *testing.T) {
	t.Parallel()
	for _, size := range []int{200, 1000, 10_000, 100_000} {
		for _, analyzed := range []bool{false, true} {
			marks := min(500, size)
			t.Run(fmt.Sprintf("%d rows, analyzed %v", size, analyzed), func(t *testing.T) {
				ctx := context.Background()
				url, table := bridgetest.PostgresTable(t)
				db, err := outbox.Open(ctx, url)
				require.NoError(t, err)
				t.Cleanup(func() { db.Close() })
				_, err = outbox.Migrate(ctx, db, table)
				require.NoError(t, err)
				// No autovacuum either: the statistics stay as the case says.
				_, err = db.SQL.ExecContext(ctx, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)")
				require.NoError(t, err)
				_, err = db.SQL.ExecContext(ctx, `INSERT INTO `+table+` (idempotency_key, subject, payload)
					SELECT 'p-' || g, 'events.x', convert_to(repeat('x', 256), 'UTF8') FROM generate_series(1, $1::int) g`, size)
				require.NoError(t, err)
				if analyzed {
					_, err = db.SQL.ExecContext(ctx, "ANALYZE "+table)
					require.NoError(t, err)
				}

				ids := make([]string, marks)
				for i := range ids {
					ids[i] = strconv.Itoa(i + 1) // the first rows, identity from 1
				}
				each := func(v string) string { return "'{" + strings.Repeat(v+",", marks-1) + v + "}'" }
				idArr := "'{" + strings.Join(ids, ",") + "}'"
				w, err := outbox.PostgresWALStatements(table)
				require.NoError(t, err)
				for _, mark := range []struct{ name, sql, args string }{
					{"done", w.MarkDone, strings.Join([]string{idArr, each("S"), idArr, each("1")}, ", ")},
					{"deleted", w.DeleteDone, idArr},
					{"dead", w.MarkDead, strings.Join([]string{idArr, each("too big"), each("1")}, ", ")},
					{"failed", w.MarkFailed, strings.Join([]string{idArr, each("nats: timeout"), each("1"), each("1000000"), each("2026-12-01T00:00:00Z")}, ", ")},
				} {
					for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
						plan := bridgetest.ExplainPrepared(t, db.SQL, mark.sql, mode, mark.args)
						what := fmt.Sprintf("%s mark, %s", mark.name, mode)
						require.EqualValues(t, marks, plan["Plans"].([]any)[0].(map[string]any)["Actual Rows"], "%s: every row of the mark is unsettled", what)
						scans := bridgetest.RequirePrimaryKeyLookups(t, db.SQL, plan, table, marks, what)
						require.Positive(t, scans, "%s: the plan reads the table", what)
					}
				}
			})
		}
	}
}
