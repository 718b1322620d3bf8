package outbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// The script of `bridge migrate --print`, applied by hand to an empty
// database, leaves what Migrate leaves: the schema version recorded, nothing
// for Migrate to apply, a table the relay accepts and claims from (on
// PostgreSQL, with the NOTIFY trigger).
func TestMigrationScriptMatchesMigrate(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var url, table string
			switch kind {
			case "sqlite":
				url, table = bridgetest.SQLiteURL(t), "outbox"
			case "postgres":
				url, table = bridgetest.PostgresTable(t)
			case "mysql":
				url, table = bridgetest.MySQLTable(t)
			}
			ctx := context.Background()
			db, err := outbox.Open(ctx, url)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })

			script, err := outbox.MigrationScript(db.Dialect(), table, 0)
			require.NoError(t, err)
			applyScript(t, db, script)

			current, target, err := outbox.SchemaVersions(ctx, db, table)
			require.NoError(t, err)
			require.Equal(t, target, current, "schema version after the script")
			applied, err := outbox.Migrate(ctx, db, table)
			require.NoError(t, err)
			require.Empty(t, applied, "bridge migrate after the script")

			store, err := outbox.NewStore(db, table)
			require.NoError(t, err)
			require.NoError(t, store.CheckSchema(ctx))
			_, err = store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "k1", Subject: "events.a", Payload: []byte("x"), OrderingKey: "o"})
			require.NoError(t, err)
			rows, err := store.Claim(ctx, "me", 10)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			if kind == "postgres" {
				require.Contains(t, script, "pg_notify('outbox_bridge'")
			}

			// After the last version there is nothing left to print.
			rest, err := outbox.MigrationScript(db.Dialect(), table, target)
			require.NoError(t, err)
			require.NotContains(t, rest, "CREATE")
			require.NotContains(t, rest, "INSERT")
		})
	}
}

// applyScript runs script as the database's command-line client would.
// SQLite takes the whole script in one call, PostgreSQL one migration per
// call (see below) (pgx sends it as
// one simple query, explicit BEGIN and COMMIT included; a trigger body's
// semicolons stay inside its dollar quotes); the relay's MySQL connections
// take one statement per call, so the script is split where the mysql
// client splits it, at a semicolon that ends a line.
func applyScript(t *testing.T, db *outbox.DB, script string) {
	t.Helper()
	if db.Dialect() == "postgres" {
		// psql sends statement after statement; one simple query of
		// several statements would be one implicit transaction, which
		// DROP INDEX CONCURRENTLY refuses. So each migration is sent by
		// itself, and one that runs without a transaction
		// ("-- bridge:no-transaction") statement by statement.
		for i, chunk := range strings.Split(script, "\n-- Migration ") {
			if i > 0 {
				chunk = "-- Migration " + chunk
			}
			stmts := []string{chunk}
			if i > 0 && strings.Contains(chunk, "-- bridge:no-transaction") {
				stmts = strings.Split(chunk, ";\n")
			}
			for _, stmt := range stmts {
				if strings.TrimSpace(stripComments(stmt)) == "" {
					continue
				}
				_, err := db.SQL.Exec(stmt)
				require.NoError(t, err, "statement:\n%s", stmt)
			}
		}
		return
	}
	if db.Dialect() != "mysql" {
		_, err := db.SQL.Exec(script)
		require.NoError(t, err, "script:\n%s", script)
		return
	}
	for _, stmt := range strings.Split(script, ";\n") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		_, err := db.SQL.Exec(stmt)
		require.NoError(t, err, "statement:\n%s", stmt)
	}
}

func stripComments(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return b.String()
}

func TestMigrationScriptRefusesUnknownDialect(t *testing.T) {
	t.Parallel()
	_, err := outbox.MigrationScript("oracle", "outbox", 0)
	require.ErrorIs(t, err, outbox.ErrUnknownDialect)
}

// TestMigrationScriptSaysWhenNothingIsLeft: --print --after N at or past
// the latest migration prints no statement and says so, rather than an
// empty script that reads like success.
func TestMigrationScriptSaysWhenNothingIsLeft(t *testing.T) {
	for _, d := range outbox.Dialects {
		script, err := outbox.MigrationScript(d, "outbox", 9999)
		require.NoError(t, err)
		require.Contains(t, script, "Nothing to apply", d)
		require.NotContains(t, script, "-- Migration ", d)
		all, err := outbox.MigrationScript(d, "outbox", 0)
		require.NoError(t, err)
		require.NotContains(t, all, "Nothing to apply", d)
	}
}
