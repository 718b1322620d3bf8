package testdb

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const noticeChildEnv = "BRIDGE_TEST_NOTICE_CHILD"

// TestSkipNoticeInLog runs `go test` on this package without database URLs
// and outside CI, as a fresh clone does, with its output captured as a CI
// log captures it (no terminal): through a pipe, and redirected into a file
// (`go test ./... > log 2>&1`, where the go command writes at its own file
// offset). The log of the passing run names the skipped suites, though go
// test shows nothing else of a passing package.
func TestSkipNoticeInLog(t *testing.T) {
	if os.Getenv(noticeChildEnv) != "" {
		return // the child run of TestSkipNoticeInLog
	}
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		run  func(*exec.Cmd) (string, error)
	}{
		{"pipe", func(cmd *exec.Cmd) (string, error) {
			out, err := cmd.CombinedOutput()
			return string(out), err
		}},
		{"file", func(cmd *exec.Cmd) (string, error) {
			f, err := os.Create(filepath.Join(t.TempDir(), "log"))
			require.NoError(t, err)
			defer f.Close()
			cmd.Stdout, cmd.Stderr = f, f // one open file: > log 2>&1
			runErr := cmd.Run()
			out, err := os.ReadFile(f.Name())
			require.NoError(t, err)
			return string(out), runErr
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
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
			out, err := tc.run(cmd)
			require.NoError(t, err, "%s", out)
			require.Contains(t, out, "ok ", "the child run passed:\n%s", out)
			require.Contains(t, out, "the PostgreSQL and MySQL/MariaDB and postgres-wal (PostgreSQL with wal_level = logical) tests are skipped",
				"the log of a passing run without database URLs names the skipped suites:\n%s", out)
			require.Contains(t, out, PostgresURLEnv+"=", "and says how to run them:\n%s", out)
		})
	}
}

// TestSkipNoticeChild is the child of TestSkipNoticeInLog: a database test
// without its server.
func TestSkipNoticeChild(t *testing.T) {
	if os.Getenv(noticeChildEnv) == "" {
		return // run by TestSkipNoticeInLog only
	}
	PostgresURL(t)
}
