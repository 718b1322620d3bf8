package testdb

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// SkipNotice says once per `go test` run which database suites are skipped
// and how to run them. go test shows nothing of a passing package but its
// "ok" line (it buffers the test binary's stdout and stderr), so a t.Skip
// alone goes unseen, on a terminal and in a CI log alike: the notice goes
// to the stderr of the test binary's parent, the go command: its own fd 2,
// duplicated (parentStderr), so that a log file it writes to keeps the
// line; where the kernel refuses that, opened as /proc/<ppid>/fd/2 (Linux,
// proc(5): a terminal or a pipe, not a file, keeps the line); where that
// cannot be opened, the terminal (/dev/tty), otherwise the binary's own
// stderr (shown with -v or when the package fails). The test binaries of one `go test` run share
// that parent: a marker file named after it lets the first binary that
// skips print the line and the others stay silent.
var SkipNotice = sync.OnceFunc(func() {
	var missing, vars []string
	if os.Getenv(PostgresURLEnv) == "" {
		missing, vars = append(missing, "PostgreSQL"), append(vars, PostgresURLEnv+"='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'")
	}
	if os.Getenv(MySQLURLEnv) == "" {
		missing, vars = append(missing, "MySQL/MariaDB"), append(vars, MySQLURLEnv+"='mysql://root@127.0.0.1:3306/test'")
	}
	start := ""
	if os.Getenv(PostgresLogicalURLEnv) == "" {
		missing = append(missing, "postgres-wal (PostgreSQL with wal_level = logical)")
		start = `eval "$(.ci/postgres-logical start)" && `
	}
	if len(missing) == 0 || !firstInRun() {
		return
	}
	var w io.Writer = os.Stderr
	if f := parentStderr(); f != nil {
		defer f.Close()
		w = f
	} else {
		for _, name := range []string{"/proc/" + strconv.Itoa(os.Getppid()) + "/fd/2", "/dev/tty"} {
			if f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0); err == nil {
				defer f.Close()
				w = f
				break
			}
		}
	}
	fmt.Fprintf(w, "go test: the %s tests are skipped; to run them: %s%s go test ./... (docs/DEVELOPMENT.md, Run the tests)\n",
		strings.Join(missing, " and "), start, strings.Join(vars, " "))
})

// PostgresLogicalURLEnv names the variable holding the URL of a PostgreSQL
// server (14+) with wal_level = logical, for the tests of source:
// postgres-wal: logical replication needs it, and a shared server's
// wal_level is not the tests' to change. .ci/postgres-logical starts a
// throwaway one and prints the variable.
const PostgresLogicalURLEnv = "BRIDGE_TEST_POSTGRES_LOGICAL_URL"

// firstInRun reports whether no other test binary of this `go test` run has
// printed the notice: it creates the marker of the run, which fails when
// it exists. Markers of runs whose go command is gone are removed.
func firstInRun() bool {
	dir := os.TempDir()
	old, _ := filepath.Glob(filepath.Join(dir, "outbox-bridge-test-notice-*"))
	for _, m := range old {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(m), "outbox-bridge-test-notice-"), "-", 2)[0])
		if _, statErr := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil && errors.Is(statErr, fs.ErrNotExist) {
			_ = os.Remove(m)
		}
	}
	ppid := os.Getppid()
	// The start time of the parent tells a reused pid from the same run.
	start := "0"
	if stat, err := os.ReadFile("/proc/" + strconv.Itoa(ppid) + "/stat"); err == nil {
		if _, rest, ok := strings.Cut(string(stat), ") "); ok {
			if fields := strings.Fields(rest); len(fields) > 19 {
				start = fields[19] // field 22 of proc(5): starttime
			}
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, "outbox-bridge-test-notice-"+strconv.Itoa(ppid)+"-"+start), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false
	}
	f.Close()
	return true
}
