package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/bridgetest/testdb"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestCommandsOverManyTables: on PostgreSQL (schemas) and MariaDB
// (databases), with one tenant per schema: `bridge migrate --table
// 'PREFIX*.outbox'` creates the table in every schema the pattern matches
// (and says each is up to date the second time); status over the pattern
// shows a line per table, --json an array of one document per table;
// retry, requeue and purge act on each, naming it; a pattern matching
// nothing beside one that matches is a warning, alone an error (exit 2);
// enqueue, retry --id and run with a source other than table refuse
// several tables (exit 2). A table
// that fails (here a foreign table named outbox, which migrate refuses to
// make a bridge table of, leaving nothing beside it) is told on stderr
// with its name and the exit status is 1, but the other tables are
// migrated and shown (found by a saboteur: the first failure stopped the
// command, and status showed nothing). Two names of one table (PostgreSQL folds case) are one.
func TestCommandsOverManyTables(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var url string
			var db *sql.DB
			ctx := context.Background()
			if kind == "postgres" {
				url = bridgetest.PostgresURL(t)
			} else {
				url = bridgetest.MySQLURL(t)
			}
			odb, err := outbox.Open(ctx, url)
			require.NoError(t, err)
			t.Cleanup(func() { odb.Close() })
			db = odb.SQL
			prefix := "mt_" + testdb.RandomHex(4) + "_"
			var tenants []string
			for _, s := range []string{"a", "b", "c", "d"} {
				word := map[string]string{"postgres": "SCHEMA ", "mysql": "DATABASE "}[kind]
				_, err := db.Exec("CREATE " + word + prefix + s)
				require.NoError(t, err)
				t.Cleanup(func() {
					_, _ = db.Exec("DROP " + word + prefix + s + map[string]string{"postgres": " CASCADE"}[kind])
				})
				if s != "d" {
					tenants = append(tenants, prefix+s+".outbox")
				}
			}
			foreign := prefix + "d.outbox"
			_, err = db.Exec("CREATE TABLE " + foreign + " (id integer, idempotency_key text)")
			require.NoError(t, err)
			env := []string{"BRIDGE_DATABASE_URL=" + url}
			dir := t.TempDir()
			pattern := prefix + "*.outbox"

			r := runBridge(t, dir, env, "migrate", "--table", pattern)
			require.Equal(t, 1, r.code, "%s", r)
			require.Contains(t, r.stderr, "bridge: "+foreign+": ")
			require.Contains(t, r.stderr, "was not made by bridge migrate", "the foreign table is named as such")
			require.Contains(t, r.stderr, "1 of 4 tables failed")
			for _, table := range tenants {
				require.Contains(t, r.stdout, "applied migration 00001 to "+table)
			}
			r = runBridge(t, dir, env, "migrate", "--table", pattern)
			require.Equal(t, 1, r.code, "%s", r)
			require.Equal(t, 3, strings.Count(r.stdout, "is up to date"), "%s", r)
			// The refused migration left nothing beside the foreign table
			// (before, a version table marked dirty, which status then took
			// for a bridge table's): status shows the three.
			r = runBridge(t, dir, env, "status", "--table", pattern)
			require.Equal(t, 0, r.code, "%s", r)
			require.Contains(t, r.stdout, "3 tables")
			_, err = db.Exec("DROP TABLE " + foreign)
			require.NoError(t, err)
			if kind == "postgres" {
				r = runBridge(t, dir, env, "status", "--streams=false", "--table", strings.ToUpper(tenants[0]), "--table", tenants[0])
				require.Equal(t, 0, r.code, "%s", r)
				require.Contains(t, r.stdout, "1 table;", "one table named twice\n%s", r)
			}

			for i, table := range tenants {
				store, err := outbox.NewStore(odb, table)
				require.NoError(t, err)
				for range i + 1 {
					bridgetest.Enqueue(t, store, testdb.RandomHex(8), "")
				}
			}
			_, err = db.Exec("UPDATE " + tenants[1] + " SET status = 'permanent_failed', last_error = 'no stream' WHERE id = 1")
			require.NoError(t, err)

			r = runBridge(t, dir, env, "status", "--table", pattern, "--table", prefix+"zzz_*.outbox")
			require.Equal(t, 0, r.code, "%s", r)
			require.Contains(t, r.stderr, "no outbox table matches the pattern")
			lines := strings.Split(r.stdout, "\n")
			require.Contains(t, lines[0], "permanent_failed")
			for i, table := range tenants {
				fields := strings.Fields(lines[i+1])
				require.Equal(t, table, fields[0], "%s", r)
				pending := map[int]string{0: "1", 1: "1", 2: "3"}[i]
				require.Equal(t, pending, fields[1], "pending of %s\n%s", table, r)
			}
			require.Contains(t, r.stdout, "3 tables")

			r = runBridge(t, dir, env, "status", "--json", "--table", pattern)
			require.Equal(t, 0, r.code, "%s", r)
			var docs []struct {
				Table string           `json:"table"`
				Rows  map[string]int64 `json:"rows"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &docs), r.stdout)
			require.Len(t, docs, 3)
			require.Equal(t, tenants[1], docs[1].Table)
			require.Equal(t, int64(1), docs[1].Rows["permanent_failed"])

			r = runBridge(t, dir, env, "retry", "--all-failed", "--table", pattern)
			require.Equal(t, 0, r.code, "%s", r)
			require.Contains(t, r.stdout, "1 dead letter back to pending, 0 failed rows claimable now in "+tenants[1])
			require.Contains(t, r.stdout, "0 dead letters back to pending, 0 failed rows claimable now in "+tenants[2])
			var dead int
			require.NoError(t, db.QueryRow("SELECT count(*) FROM "+tenants[1]+" WHERE status = 'permanent_failed'").Scan(&dead))
			require.Zero(t, dead)
			for _, args := range [][]string{{"requeue", "--older-than", "1m"}, {"purge", "--done-older-than", "1h"}} {
				r = runBridge(t, dir, env, append(args, "--table", pattern)...)
				require.Equal(t, 0, r.code, "%s", r)
				require.Equal(t, 3, strings.Count(r.stdout, " in "+prefix), "%s", r)
			}

			for _, args := range [][]string{
				{"status", "--table", prefix + "zzz_*.outbox"},
				{"run", "--source", "watermill-forwarder", "--table", pattern},
				{"enqueue", "--subject", "events.x", "--data", "x", "--table", tenants[0], "--table", tenants[1]},
				{"retry", "--id", "1", "--table", pattern},
			} {
				r = runBridge(t, dir, env, args...)
				require.Equal(t, 2, r.code, "bridge %v\n%s", args, r)
			}
		})
	}
}
