package producerrelay_test

import (
	"context"
	"database/sql"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestExampleTableMatchesMigration keeps the SQLite DDL copied into the
// producer module's example_test.go equal to the table `bridge migrate`
// creates.
func TestExampleTableMatchesMigration(t *testing.T) {
	t.Parallel()
	ddl := exampleDDL(t)
	example, err := outbox.Open(context.Background(), "sqlite:"+t.TempDir()+"/example.db")
	require.NoError(t, err)
	t.Cleanup(func() { example.Close() })
	_, err = example.SQL.Exec(ddl)
	require.NoError(t, err)
	migrated := setup(t, "sqlite")
	require.Equal(t, tableInfo(t, migrated.prod), tableInfo(t, example.SQL))

	// The relay accepts the example's table as its own.
	store, err := outbox.NewStore(example, "outbox")
	require.NoError(t, err)
	require.NoError(t, store.CheckSchema(context.Background()))
}

// exampleDDL reads the constant outboxSQLite of the producer module's
// example_test.go: that module cannot import the relay's migrations, so
// the copy is checked from here.
func exampleDDL(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../producer/example_test.go", nil, 0)
	require.NoError(t, err)
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			if len(v.Names) == 1 && v.Names[0].Name == "outboxSQLite" {
				s, err := strconv.Unquote(v.Values[0].(*ast.BasicLit).Value)
				require.NoError(t, err)
				return s
			}
		}
	}
	t.Fatal("producer/example_test.go has no constant outboxSQLite")
	return ""
}

// tableInfo describes the columns of table outbox: name, type, NOT NULL,
// default, primary key.
func tableInfo(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`SELECT name, type, "notnull", COALESCE(dflt_value, 'NULL'), pk FROM pragma_table_info('outbox') ORDER BY cid`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name, typ, dflt string
		var notNull, pk int
		require.NoError(t, rows.Scan(&name, &typ, &notNull, &dflt, &pk))
		out = append(out, fmt.Sprintf("%s %s notnull=%d default=%s pk=%d", name, typ, notNull, dflt, pk))
	}
	require.NoError(t, rows.Err())
	require.Len(t, out, 17)
	return out
}
