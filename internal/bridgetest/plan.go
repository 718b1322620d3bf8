package bridgetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ExplainPrepared prepares query on one session of db and returns the top
// node of EXPLAIN (ANALYZE, FORMAT JSON) of its execution with args (SQL
// literals, comma-separated), run with plan_cache_mode set to mode
// (force_custom_plan: planned for the values, as a statement sent with
// them is; force_generic_plan: planned without them, as a prepared
// statement may be after its fifth run) in a transaction that is rolled
// back: what the statement changes is not kept. PostgreSQL only.
func ExplainPrepared(t testing.TB, db *sql.DB, query, mode, args string) map[string]any {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "PREPARE bridgetest_explained AS "+query)
	require.NoError(t, err)
	defer func() { _, _ = conn.ExecContext(ctx, "DEALLOCATE bridgetest_explained") }()
	tx, err := conn.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(t, err)
	var raw []byte
	require.NoError(t, tx.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE bridgetest_explained("+args+")").Scan(&raw))
	var plan []map[string]any
	require.NoError(t, json.Unmarshal(raw, &plan))
	return plan[0]["Plan"].(map[string]any)
}

// RequirePrimaryKeyLookups checks a plan from ExplainPrepared: every scan
// of table (a schema-qualified name is fine) under node is an index scan
// of the table's primary key that read (returned or filtered out) at most
// rows rows over all its loops, and no join filtered a row out. It returns
// how many scans of table it found. what names the statement in failure
// messages, which print the plan.
func RequirePrimaryKeyLookups(t testing.TB, db *sql.DB, node map[string]any, table string, rows int, what string) int {
	t.Helper()
	var pkey string
	require.NoError(t, db.QueryRowContext(context.Background(), `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = $1::regclass AND i.indisprimary`, table).Scan(&pkey))
	name := table[strings.LastIndex(table, ".")+1:]
	plan, _ := json.MarshalIndent(node, "", "  ")
	var walk func(node map[string]any) int
	walk = func(node map[string]any) int {
		removed, _ := node["Rows Removed by Join Filter"].(float64)
		require.Zero(t, removed, "%s: a join filtered rows out; plan:\n%s", what, plan)
		scans := 0
		if node["Relation Name"] == name && node["Node Type"] != "ModifyTable" {
			scans++
			require.Equal(t, "Index Scan", node["Node Type"], "%s: plan:\n%s", what, plan)
			require.Equal(t, pkey, node["Index Name"], "%s: plan:\n%s", what, plan)
			filtered, _ := node["Rows Removed by Filter"].(float64)
			read := (node["Actual Rows"].(float64) + filtered) * node["Actual Loops"].(float64)
			require.LessOrEqual(t, int(read), rows, "%s: a scan reads more rows than the statement names; plan:\n%s", what, plan)
		}
		children, _ := node["Plans"].([]any)
		for _, c := range children {
			scans += walk(c.(map[string]any))
		}
		return scans
	}
	return walk(node)
}
