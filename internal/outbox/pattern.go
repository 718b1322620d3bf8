package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-bridge/bridge/internal/sqlname"
)

// PatternRule says in words what CheckTablePattern accepts, for error
// messages.
const PatternRule = "a table name, or a pattern of them with * in the schema or the table part ('tenant_*.outbox', 'app.*_outbox', '*.outbox'): " +
	"* stands for any run of letters, digits and _"

// IsTablePattern reports whether name is a pattern of table names (it
// holds *) rather than one table name.
func IsTablePattern(name string) bool { return strings.Contains(name, "*") }

// CheckTablePattern returns nil when p is a table name sqlname.Check
// accepts, or a pattern: such a name with * in place of any run of
// identifier characters in its schema or table part. The error says which
// part is wrong and why.
func CheckTablePattern(p string) error {
	if !IsTablePattern(p) {
		return sqlname.Check(p)
	}
	// Checked as the shortest name it matches with a letter in place of
	// each *: the parts must be identifiers, the table part not a
	// version table's name.
	probe := strings.ReplaceAll(p, "*", "x")
	if err := sqlname.Check(probe); err != nil {
		return fmt.Errorf("pattern %q: %w", p, err)
	}
	return nil
}

// MatchTables returns the bridge tables of db that pattern matches (a name
// or a pattern, see CheckTablePattern), sorted, as the relay names them:
// schema-qualified when the pattern is, otherwise in the session's current
// schema (PostgreSQL current_schema(), MySQL DATABASE(); SQLite has no
// schemas). A bridge table is one that Migrate made: its version table
// <table>_migrations is beside it. A name without * is returned as it is,
// whether or not the table exists (opening it says so). PostgreSQL folds
// unquoted names to lower case, so a pattern matches there in lower case.
func (db *DB) MatchTables(ctx context.Context, pattern string) ([]string, error) {
	if err := CheckTablePattern(pattern); err != nil {
		return nil, err
	}
	if !IsTablePattern(pattern) {
		return []string{pattern}, nil
	}
	schemaPat, tablePat, qualified := strings.Cut(pattern, ".")
	if !qualified {
		schemaPat, tablePat = "", schemaPat
	}
	if db.Dialect() == DialectPostgres {
		schemaPat, tablePat = strings.ToLower(schemaPat), strings.ToLower(tablePat)
	}
	all, err := db.driver.tables(ctx, db.SQL, qualified)
	if err != nil {
		return nil, fmt.Errorf("list the tables that %q may match: %w", pattern, err)
	}
	versions := map[tableName]bool{}
	for _, t := range all {
		if name, ok := strings.CutSuffix(t.name, sqlname.MigrationsSuffix); ok {
			versions[tableName{schema: t.schema, name: name}] = true
		}
	}
	var out []string
	for _, t := range all {
		if !versions[t] || !globMatch(tablePat, t.name) || (qualified && !globMatch(schemaPat, t.schema)) {
			continue
		}
		if sqlname.Check(t.String()) != nil {
			continue // a name the relay cannot write unquoted
		}
		out = append(out, t.String())
	}
	slices.Sort(out)
	return out, nil
}

// MatchSchemas returns the schemas of db (MySQL: databases) whose name
// pattern matches (* for any run of characters), sorted; none on SQLite.
// bridge migrate creates a table in each.
func (db *DB) MatchSchemas(ctx context.Context, pattern string) ([]string, error) {
	if db.Dialect() == DialectPostgres {
		pattern = strings.ToLower(pattern)
	}
	all, err := db.driver.schemas(ctx, db.SQL)
	if err != nil {
		return nil, fmt.Errorf("list the schemas that %q may match: %w", pattern, err)
	}
	var out []string
	for _, s := range all {
		if globMatch(pattern, s) && sqlname.Check(s+".x") == nil {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out, nil
}

// globMatch reports whether name matches pattern, where * stands for any
// run of characters (none included) and everything else for itself.
func globMatch(pattern, name string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == name
	}
	if !strings.HasPrefix(name, parts[0]) {
		return false
	}
	name = name[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(name, p)
		if i < 0 {
			return false
		}
		name = name[i+len(p):]
	}
	return len(name) >= len(last) && strings.HasSuffix(name, last)
}

// listNames runs query (rows of schema, name) and returns its rows.
func listNames(ctx context.Context, db *sql.DB, query string, args ...any) ([]tableName, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []tableName
	for rows.Next() {
		var t tableName
		if err := rows.Scan(&t.schema, &t.name); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// listStrings runs query (rows of one text column) and returns its rows.
func listStrings(ctx context.Context, db *sql.DB, query string) ([]string, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
