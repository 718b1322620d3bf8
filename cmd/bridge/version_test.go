package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The values TestMain stamps into the test binary, as a release does.
const (
	testVersion    = "v0.0.0-test"
	testCommit     = "0123456789abcdef0123456789abcdef01234567"
	testCommitTime = "2026-11-30T12:00:00Z"
	buildinfoPkg   = "github.com/outbox-bridge/bridge/internal/buildinfo"
	buildinfoFlags = "-X " + buildinfoPkg + ".version=" + testVersion +
		" -X " + buildinfoPkg + ".commit=" + testCommit +
		" -X " + buildinfoPkg + ".date=" + testCommitTime
)

// bridge version, the first log line of bridge run and bridge_build_info
// on /metrics all name the build's version, commit and commit time.
func TestVersionCommitAndBuildInfo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runBridge(t, dir, nil, "version")
	require.Equal(t, 0, r.code, "bridge version\n%s", r)
	require.Regexp(t, `^bridge `+testVersion+` \(commit `+testCommit+`, `+testCommitTime+`, go1\.\d+(\.\d+)? \w+/\w+\)\n$`, r.stdout)

	run := startRelay(t, dir)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + run.httpListen + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	var info string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "bridge_build_info{") {
			info = line
		}
	}
	require.NotEmpty(t, info, "/metrics has no bridge_build_info:\n%s", body)
	for _, label := range []string{`version="` + testVersion + `"`, `commit="` + testCommit + `"`, `commit_time="` + testCommitTime + `"`, `goversion="go1.`} {
		require.Contains(t, info, label)
	}
	require.True(t, strings.HasSuffix(info, "} 1"), info)

	require.NoError(t, run.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, run.wait(t, 30*time.Second), "bridge run after SIGTERM\nstderr:\n%s", run.stderr)
	first, _, _ := strings.Cut(run.stderr.String(), "\n")
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(first), &rec), "first log line %q", first)
	require.Equal(t, "bridge starting", rec["msg"], first)
	require.Equal(t, testVersion, rec["version"], first)
	require.Equal(t, testCommit, rec["commit"], first)
}
