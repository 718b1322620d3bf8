package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/bridgetest/testdb"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestMatchTables: on every database, a pattern matches the bridge tables
// (migrated: their version table beside them, the column idempotency_key
// in them) whose schema and name it matches, sorted; not a table of the
// same name that bridge migrate did not make, even with a version table
// beside it (a migration that failed on it leaves one), not a version
// table, not a table of another schema, and on PostgreSQL not a schema
// with capitals, which unquoted would name another (found by a saboteur:
// "Sab_X" matched, and was then written as sab_x). A plain name comes back
// as it is. MatchSchemas lists the schemas (MySQL: databases) a pattern
// matches.
func TestMatchTables(t *testing.T) {
	bridgetest.OnEveryDatabase(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		var url, prefix string
		switch kind {
		case "sqlite":
			url = bridgetest.SQLiteURL(t)
		case "postgres":
			url, prefix = bridgetest.PostgresURL(t), "m_"+testdb.RandomHex(4)+"_"
		case "mysql":
			url, prefix = bridgetest.MySQLURL(t), "m_"+testdb.RandomHex(4)+"_"
		}
		db, err := outbox.Open(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		exec := func(query string) {
			t.Helper()
			_, err := db.SQL.ExecContext(ctx, query)
			require.NoError(t, err, query)
		}
		migrate := func(table string) {
			t.Helper()
			_, err := outbox.Migrate(ctx, db, table)
			require.NoError(t, err, table)
		}
		if kind == "sqlite" {
			migrate("a_outbox")
			migrate("b_outbox")
			exec("CREATE TABLE c_outbox (id integer)") // not a bridge table
			exec("CREATE TABLE c_outbox_migrations (id integer)")
			got, err := db.MatchTables(ctx, "*_outbox")
			require.NoError(t, err)
			require.Equal(t, []string{"a_outbox", "b_outbox"}, got)
			schemas, err := db.MatchSchemas(ctx, "*")
			require.NoError(t, err)
			require.Empty(t, schemas)
			return
		}
		for _, s := range []string{"a", "b", "c"} {
			exec("CREATE " + map[string]string{"postgres": "SCHEMA ", "mysql": "DATABASE "}[kind] + prefix + s)
			t.Cleanup(func() {
				_, _ = db.SQL.Exec("DROP " + map[string]string{"postgres": "SCHEMA ", "mysql": "DATABASE "}[kind] + prefix + s + map[string]string{"postgres": " CASCADE"}[kind])
			})
		}
		migrate(prefix + "a.outbox")
		migrate(prefix + "b.outbox")
		migrate(prefix + "a.orders_outbox")
		exec("CREATE TABLE " + prefix + "c.outbox (id integer)") // not a bridge table
		exec("CREATE TABLE " + prefix + "c.outbox_migrations (id integer)")
		if kind == "postgres" {
			upper := `"` + strings.ToUpper(prefix) + `D"`
			exec("CREATE SCHEMA " + upper)
			t.Cleanup(func() { _, _ = db.SQL.Exec("DROP SCHEMA " + upper + " CASCADE") })
			exec("CREATE TABLE " + upper + ".outbox (idempotency_key text)")
			exec("CREATE TABLE " + upper + ".outbox_migrations (id integer)")
		}

		for pattern, want := range map[string][]string{
			prefix + "*.outbox":           {prefix + "a.outbox", prefix + "b.outbox"},
			"*" + prefix[1:] + "*.outbox": {prefix + "a.outbox", prefix + "b.outbox"},
			prefix + "a.*":                {prefix + "a.orders_outbox", prefix + "a.outbox"},
			prefix + "*.*_outbox":         {prefix + "a.orders_outbox"},
			prefix + "b.*":                {prefix + "b.outbox"},
			prefix + "c.*":                nil,
			prefix + "a.outbox":           {prefix + "a.outbox"},
		} {
			got, err := db.MatchTables(ctx, pattern)
			require.NoError(t, err, pattern)
			require.Equal(t, want, got, pattern)
		}
		schemas, err := db.MatchSchemas(ctx, "*"+prefix[1:]+"*")
		require.NoError(t, err)
		require.Equal(t, []string{prefix + "a", prefix + "b", prefix + "c"}, schemas)
		_, err = db.MatchTables(ctx, "bad-*.outbox")
		require.ErrorContains(t, err, "not an SQL identifier")
	})
}

// TestMayClaimEach: one statement answers, table by table, what each
// table's MayClaim answers: a pending row, none, a failed row still in
// its backoff, a failed row past it; on SQLite, which claims without a
// probe, ErrNoProbe. A missing table fails the statement, as a missing
// table (IsMissingTable).
func TestMayClaimEach(t *testing.T) {
	bridgetest.OnEveryDatabase(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		db, table, stores := migrateTables(t, kind, 4)
		if kind == "sqlite" {
			_, err := db.MayClaimEach(ctx, stores)
			require.ErrorIs(t, err, outbox.ErrNoProbe)
			return
		}
		bridgetest.Enqueue(t, stores[0], "pending", "")
		for i, backoff := range map[int]time.Duration{2: time.Hour, 3: 0} {
			id := bridgetest.Enqueue(t, stores[i], "failing", "")
			require.Equal(t, []int64{id}, bridgetest.ClaimIDs(t, stores[i], "test"))
			_, err := stores[i].MarkFailed(ctx, "test", []outbox.Failure{{ID: id, Attempt: 1, Err: "x", Backoff: backoff}})
			require.NoError(t, err)
		}
		got, err := db.MayClaimEach(ctx, stores)
		require.NoError(t, err)
		require.Equal(t, []bool{true, false, false, true}, got)
		for i, s := range stores {
			one, err := s.MayClaim(ctx)
			require.NoError(t, err)
			require.Equal(t, one, got[i], "table %d: MayClaim alone", i)
		}
		missing, err := outbox.NewStore(db, table+"_gone")
		require.NoError(t, err)
		_, err = db.MayClaimEach(ctx, append(stores, missing))
		require.True(t, outbox.IsMissingTable(err), "%v", err)
	})
}

// TestBacklogEach: one statement counts, table by table, the rows waiting
// to be relayed: pending rows, keyed ones behind their key's head too, and
// failed rows, in their backoff or past it; not a row without a key in
// flight, nor one relayed. The count stops at BacklogCap. A missing table
// fails the statement, as a missing table (IsMissingTable).
func TestBacklogEach(t *testing.T) {
	bridgetest.OnEveryDatabase(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		db, table, stores := migrateTables(t, kind, 4)
		bridgetest.Enqueue(t, stores[0], "unkeyed", "")
		bridgetest.Enqueue(t, stores[0], "head", "k")
		bridgetest.Enqueue(t, stores[0], "behind", "k")
		for i, backoff := range map[int]time.Duration{2: time.Hour, 3: 0} {
			id := bridgetest.Enqueue(t, stores[i], "failing", "")
			require.Equal(t, []int64{id}, claimOne(t, stores[i]))
			_, err := stores[i].MarkFailed(ctx, "test", []outbox.Failure{{ID: id, Attempt: 1, Err: "x", Backoff: backoff}})
			require.NoError(t, err)
			bridgetest.Enqueue(t, stores[i], "then", "")
		}
		got, err := db.BacklogEach(ctx, stores)
		require.NoError(t, err)
		require.Equal(t, []int64{3, 0, 2, 2}, got)
		require.Len(t, claimOne(t, stores[3]), 1)
		got, err = db.BacklogEach(ctx, stores)
		require.NoError(t, err)
		require.Equal(t, []int64{3, 0, 2, 1}, got, "a row without a key in flight is not backlog")

		var values []string
		for i := range outbox.BacklogCap + 5 {
			values = append(values, fmt.Sprintf("('cap-%d', 'events.t', '', '{}')", i))
			if len(values) == 1000 || i == outbox.BacklogCap+4 {
				_, err := db.SQL.ExecContext(ctx, "INSERT INTO "+stores[1].Table()+" (idempotency_key, subject, payload, headers) VALUES "+strings.Join(values, ", "))
				require.NoError(t, err)
				values = values[:0]
			}
		}
		got, err = db.BacklogEach(ctx, stores)
		require.NoError(t, err)
		require.Equal(t, []int64{3, outbox.BacklogCap, 2, 1}, got, "counted up to BacklogCap")

		missing, err := outbox.NewStore(db, table+"_gone")
		require.NoError(t, err)
		_, err = db.BacklogEach(ctx, append(stores, missing))
		require.True(t, outbox.IsMissingTable(err), "%v", err)
	})
}

// claimOne claims the oldest row of s and returns its id.
func claimOne(t *testing.T, s *outbox.Store) []int64 {
	t.Helper()
	rows, err := s.ClaimBatch(context.Background(), outbox.ClaimParams{Owner: "test", Limit: 1})
	require.NoError(t, err)
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

// migrateTables opens the test database of kind and migrates n outbox
// tables in it, named after table with _0, _1, … appended.
func migrateTables(t *testing.T, kind string, n int) (db *outbox.DB, table string, stores []*outbox.Store) {
	t.Helper()
	ctx := context.Background()
	url, table, _ := bridgetest.Outbox(t, kind)
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	for i := range n {
		name := fmt.Sprintf("%s_%d", table, i)
		_, err := outbox.Migrate(ctx, db, name)
		require.NoError(t, err)
		s, err := outbox.NewStore(db, name)
		require.NoError(t, err)
		stores = append(stores, s)
	}
	return db, table, stores
}
