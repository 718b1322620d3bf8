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
	// version table's name. The error is told in the pattern's terms.
	probe := strings.ReplaceAll(p, "*", "x")
	if err := sqlname.Check(probe); err != nil {
		text := err.Error()
		probeParts, parts := strings.Split(probe, "."), strings.Split(p, ".")
		text = strings.ReplaceAll(text, fmt.Sprintf("%q", probe), fmt.Sprintf("%q", p))
		if len(parts) == len(probeParts) {
			for i := range parts {
				text = strings.ReplaceAll(text, fmt.Sprintf("%q", probeParts[i]), fmt.Sprintf("%q", parts[i]))
			}
		}
		return fmt.Errorf("pattern %s", text)
	}
	return nil
}

// FoldName is name as the database resolves it unquoted: in lower case on
// PostgreSQL, as it is elsewhere. Two names that fold alike are one table.
func (db *DB) FoldName(name string) string {
	if db.Dialect() == DialectPostgres {
		return strings.ToLower(name)
	}
	return name
}

// MatchTables returns the bridge tables of db that pattern matches (a name
// or a pattern, see CheckTablePattern), sorted, as the relay names them:
// schema-qualified when the pattern is, otherwise in the session's current
// schema (PostgreSQL current_schema(), MySQL DATABASE(); SQLite has no
// schemas). A bridge table is one that Migrate made: it has the column
// idempotency_key and its version table <table>_migrations is beside it.
// A table whose name the relay cannot write unquoted is left out (on
// PostgreSQL, one with capitals: unquoted, its name folds to another
// table's). A name without * is returned as it is, whether or not the
// table exists (opening it says so).
func (db *DB) MatchTables(ctx context.Context, pattern string) ([]string, error) {
	if err := CheckTablePattern(pattern); err != nil {
		return nil, err
	}
	if !IsTablePattern(pattern) {
		return []string{pattern}, nil
	}
	schemaPat, tablePat, qualified := strings.Cut(db.FoldName(pattern), ".")
	if !qualified {
		schemaPat, tablePat = "", schemaPat
	}
	all, err := db.driver.tables(ctx, db.SQL, qualified, likePattern(schemaPat))
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
		switch {
		case !t.hasKey, !versions[t.tableName], !globMatch(tablePat, t.name), qualified && !globMatch(schemaPat, t.schema):
		case !db.writesUnquoted(t.String()):
		default:
			out = append(out, t.String())
		}
	}
	slices.Sort(out)
	return out, nil
}

// writesUnquoted reports whether name, as the catalog holds it, is the
// name the relay reaches writing it unquoted.
func (db *DB) writesUnquoted(name string) bool {
	return sqlname.Check(name) == nil && db.FoldName(name) == name
}

// MatchSchemas returns the schemas of db (MySQL: databases) whose name
// pattern matches (* for any run of characters), sorted, leaving out those
// the relay cannot write unquoted (as MatchTables); none on SQLite.
// bridge migrate creates a table in each.
func (db *DB) MatchSchemas(ctx context.Context, pattern string) ([]string, error) {
	pattern = db.FoldName(pattern)
	all, err := db.driver.schemas(ctx, db.SQL)
	if err != nil {
		return nil, fmt.Errorf("list the schemas that %q may match: %w", pattern, err)
	}
	var out []string
	for _, s := range all {
		if globMatch(pattern, s) && db.writesUnquoted(s+".x") {
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

// listedTable is a table of the catalog (driver.tables): its name, and
// whether it has the column idempotency_key.
type listedTable struct {
	tableName
	hasKey bool
}

// listTables runs query (rows of schema, name, has idempotency_key) and
// returns its rows.
func listTables(ctx context.Context, db *sql.DB, query string, args ...any) ([]listedTable, error) {
	return queryAll(ctx, db, query, func(rows *sql.Rows, t *listedTable) error { return rows.Scan(&t.schema, &t.name, &t.hasKey) }, args...)
}

// likePattern is an SQL LIKE pattern matching at least what the glob
// pattern (* for any run of characters) matches: * becomes %, and _ stays
// a LIKE wildcard of one character, which matches _ too (escaping it would
// depend on the server's NO_BACKSLASH_ESCAPES). Names the relay accepts
// hold no %.
func likePattern(glob string) string { return strings.ReplaceAll(glob, "*", "%") }

// listStrings runs query (rows of one text column) and returns its rows.
func listStrings(ctx context.Context, db *sql.DB, query string) ([]string, error) {
	return queryAll(ctx, db, query, func(rows *sql.Rows, s *string) error { return rows.Scan(s) })
}

// queryAll runs query and returns its rows, each read by scan.
func queryAll[T any](ctx context.Context, db *sql.DB, query string, scan func(*sql.Rows, *T) error, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ResolveTables returns the outbox tables that names (names and patterns,
// see MatchTables) give, in the order given, each pattern replaced by the
// bridge tables it matches, each table once by the name FoldName gives
// it; and the patterns among names that matched nothing. A plain name is
// returned whether or not its table exists (opening it says so).
func (db *DB) ResolveTables(ctx context.Context, names []string) (tables, unmatched []string, err error) {
	list := NewTableList(db)
	for _, name := range names {
		matched, err := db.MatchTables(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		if len(matched) == 0 {
			unmatched = append(unmatched, name)
		}
		list.Add(matched...)
	}
	return list.Names, unmatched, nil
}

// TableList is a list of table names of one database, each once by the
// name it resolves to (DB.FoldName), in the order added.
type TableList struct {
	db   *DB
	seen map[string]bool
	// Names are the tables added, in order.
	Names []string
}

// NewTableList returns an empty list of db's tables.
func NewTableList(db *DB) *TableList { return &TableList{db: db, seen: map[string]bool{}} }

// Add adds the tables not yet in the list.
func (l *TableList) Add(tables ...string) {
	for _, t := range tables {
		if key := l.db.FoldName(t); !l.seen[key] {
			l.seen[key] = true
			l.Names = append(l.Names, t)
		}
	}
}
