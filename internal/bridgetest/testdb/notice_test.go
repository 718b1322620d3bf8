package testdb

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const noticeChildEnv = "BRIDGE_TEST_NOTICE_CHILD"

// TestSkipNoticeInLog runs `go test` on this package without database URLs
// and outside CI, as a fresh clone does, with its output captured as a CI
// log captures it (no terminal): the log of the passing run names the
// skipped suites, though go test shows nothing else of a passing package.
func TestSkipNoticeInLog(t *testing.T) {
	if os.Getenv(noticeChildEnv) != "" {
		return // the child run of TestSkipNoticeInLog
	}
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	require.NoError(t, err)
	cmd := exec.Command(goCmd, "test", "-count=1", "-run", "^TestSkipNoticeChild$", ".")
	cmd.Env = []string{noticeChildEnv + "=1"}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case PostgresURLEnv, MySQLURLEnv, PostgresLogicalURLEnv, "CI", noticeChildEnv:
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdin = nil
	out, err := cmd.CombinedOutput() // pipes: no terminal, as in CI
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "ok ", "the child run passed:\n%s", out)
	require.Contains(t, string(out), "the PostgreSQL and MySQL/MariaDB and postgres-wal (PostgreSQL with wal_level = logical) tests are skipped",
		"the log of a passing run without database URLs names the skipped suites:\n%s", out)
	require.Contains(t, string(out), PostgresURLEnv+"=", "and says how to run them:\n%s", out)
}

// TestSkipNoticeChild is the child of TestSkipNoticeInLog: a database test
// without its server.
func TestSkipNoticeChild(t *testing.T) {
	if os.Getenv(noticeChildEnv) == "" {
		return // run by TestSkipNoticeInLog only
	}
	PostgresURL(t)
}
