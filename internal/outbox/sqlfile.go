package outbox

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"text/template"
)

// sqlFiles holds the SQL of every driver: migrations/<dialect>/ (numbered
// schema migrations, see Migrate) and queries/<dialect>/ (the executor's
// statements, one file each; "all:" keeps the files whose name starts
// with "_", which go:embed leaves out otherwise) and optin/ (what an
// operator may add by hand, see NotifyTriggerSQL).
//
//go:embed migrations all:queries optin
var sqlFiles embed.FS

// sqlData is what an SQL file's template sees: {{.Table}} is the
// (optionally schema-qualified) table name, {{.Name}} the name without the
// schema, {{.Index "suffix"}} the name of one of the table's indexes.
// Text between {{/* and */}} is documentation, left out of the statement.
type sqlData struct {
	Table, Name string
	driver      driver
	table       tableName
}

// Index names an index of the table: {{.Index "claimable"}}.
func (m sqlData) Index(suffix string) string { return m.driver.indexName(m.table, suffix) }

// SchemaIndex names an index of the table qualified by the table's schema
// when it has one, as DROP INDEX needs it on PostgreSQL (an index lives in
// its table's schema): {{.SchemaIndex "claimable"}}.
func (m sqlData) SchemaIndex(suffix string) string {
	if m.table.schema == "" {
		return m.Index(suffix)
	}
	return m.table.schema + "." + m.Index(suffix)
}

// renderedSQL is one file of a folder of SQL files, rendered for one table.
type renderedSQL struct {
	file string
	sql  string
}

// renderSQLDir renders the files of dir (migrations/<dialect> or
// queries/<dialect>) for table t, in name order. The files are parsed as
// one template set, so that a file can use what another defines with
// {{define}}; a file whose name starts with "_" holds only such
// definitions and is not rendered by itself.
func renderSQLDir(dir string, d driver, t tableName) ([]renderedSQL, error) {
	entries, err := fs.ReadDir(sqlFiles, dir)
	if err != nil {
		return nil, fmt.Errorf("read embedded SQL: %w", err)
	}
	set := template.New(dir).Option("missingkey=error")
	for _, e := range entries {
		text, err := fs.ReadFile(sqlFiles, dir+"/"+e.Name())
		if err != nil {
			return nil, err
		}
		if _, err := set.New(e.Name()).Parse(string(text)); err != nil {
			return nil, fmt.Errorf("embedded SQL %s/%s: %w", dir, e.Name(), err)
		}
	}
	data := sqlData{Table: t.String(), Name: t.name, driver: d, table: t}
	var out []renderedSQL
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "_") {
			continue
		}
		var b bytes.Buffer
		if err := set.ExecuteTemplate(&b, e.Name(), data); err != nil {
			return nil, fmt.Errorf("embedded SQL %s/%s: %w", dir, e.Name(), err)
		}
		out = append(out, renderedSQL{file: e.Name(), sql: b.String()})
	}
	return out, nil
}

// queryFiles are the statements of queries/<dialect>/ rendered for one
// table, which a driver takes one by one into its own struct of
// statements (see take).
type queryFiles struct {
	dir     string
	sql     map[string]string // by file name without .sql
	missing []string
}

func loadQueries(d driver, t tableName) (*queryFiles, error) {
	dir := "queries/" + string(d.dialect())
	rendered, err := renderSQLDir(dir, d, t)
	if err != nil {
		return nil, err
	}
	q := &queryFiles{dir: dir, sql: make(map[string]string, len(rendered))}
	for _, r := range rendered {
		q.sql[strings.TrimSuffix(r.file, ".sql")] = strings.TrimSpace(r.sql)
	}
	return q, nil
}

// take returns the statement of file name.sql; done reports the files that
// were missing.
func (q *queryFiles) take(name string) string {
	s, ok := q.sql[name]
	if !ok {
		q.missing = append(q.missing, name+".sql")
	}
	delete(q.sql, name)
	return s
}

// done reports an error when a file taken was missing or a file was not
// taken: the files and the driver's statements must match one to one.
func (q *queryFiles) done() error {
	if len(q.missing) > 0 {
		return fmt.Errorf("embedded SQL %s: missing %s", q.dir, strings.Join(q.missing, ", "))
	}
	if len(q.sql) > 0 {
		var left []string
		for name := range q.sql {
			left = append(left, name+".sql")
		}
		slices.Sort(left)
		return fmt.Errorf("embedded SQL %s: not used: %s", q.dir, strings.Join(left, ", "))
	}
	return nil
}
