package producer

import (
	"embed"
	"strings"
	"text/template"
)

// queries/<dialect>/insert.sql are copies of the relay's own
// (internal/outbox/queries/<dialect>/insert.sql), which this module cannot
// import; a test of the relay's module keeps them equal
// (TestProducerInsertIsTheRelays).
//
//go:embed queries
var queryFiles embed.FS

// insertTemplates are the insert statements by dialect directory.
var insertTemplates = map[string]*template.Template{
	"postgres": parseInsert("postgres"),
	"mysql":    parseInsert("mysql"),
	"sqlite":   parseInsert("sqlite"),
}

func parseInsert(dir string) *template.Template {
	text, err := queryFiles.ReadFile("queries/" + dir + "/insert.sql")
	if err != nil {
		panic(err) // embedded: present at build time
	}
	return template.Must(template.New(dir).Option("missingkey=error").Parse(string(text)))
}

// insertStatement renders the insert of dialect directory dir for table.
func insertStatement(dir, table string) string {
	var b strings.Builder
	if err := insertTemplates[dir].Execute(&b, struct{ Table string }{table}); err != nil {
		panic(err) // a template of one field, given
	}
	return strings.TrimSpace(b.String())
}
