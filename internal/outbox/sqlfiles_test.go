package outbox_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository's root, two directories up from this package.
const repoRoot = "../.."

// spliced is a statement whose table name is put in by Go code: the shape
// of a statement on the outbox table, whose name is configured. SQL
// keywords are upper case in this code base (a lower-case "from %s" is a
// message).
var spliced = regexp.MustCompile("\\b(UPDATE|INSERT INTO|DELETE FROM|FROM|JOIN)\\s*([\"`]\\s*\\+|%s)")

// splicedAllowed are the files that may splice a table name into a
// statement, and why: none of them is a statement on the outbox table's
// rows.
var splicedAllowed = map[string]string{
	"internal/outbox/migrate.go":        "goose's version table",
	"internal/outbox/migrate_script.go": "goose's version table, in the script migrate --print writes",
}

// splicedSkipped are the directories not searched, and why.
var splicedSkipped = map[string]string{
	"cmd/bridge-bench":    "the benchmark fills its own tables in bulk (generate_series), not the product",
	"internal/bridgetest": "test helpers",
	"internal/source/watermillforwarder/watermillforwardertest": "test helpers: a Watermill service's own tables",
	"examples": "a service's own business tables",
}

// TestNoOutboxStatementOutsideQueryFiles: every statement on the outbox
// table is a query file (internal/outbox/queries/<dialect>/, the producer
// module's copies of insert.sql) or a migration; Go code splices no table
// name into SQL. Before, the postgres-wal source wrote its marks, sweep,
// stall and set-aside reads in Go strings, and the producer module its
// insert.
func TestNoOutboxStatementOutsideQueryFiles(t *testing.T) {
	var found []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if _, skip := splicedSkipped[rel]; skip || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		if _, ok := splicedAllowed[rel]; ok {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(text), "\n") {
			if spliced.MatchString(line) {
				found = append(found, rel+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "statements with a table name spliced in by Go code: put them in a query file")
}

// TestProducerInsertIsTheRelays: the producer module's insert statements
// (producer/queries/, embedded: that module cannot import the relay's
// internal packages) are the relay's own query files, byte for byte.
func TestProducerInsertIsTheRelays(t *testing.T) {
	for _, dialect := range []string{"postgres", "mysql", "sqlite"} {
		relay, err := os.ReadFile(filepath.Join("queries", dialect, "insert.sql"))
		require.NoError(t, err)
		copied, err := os.ReadFile(filepath.Join(repoRoot, "producer", "queries", dialect, "insert.sql"))
		require.NoError(t, err, "producer/queries/%s/insert.sql", dialect)
		require.Equal(t, string(relay), string(copied), "producer/queries/%s/insert.sql differs from internal/outbox/queries/%s/insert.sql: copy it", dialect, dialect)
	}
}
