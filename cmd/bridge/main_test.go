package main

// These tests build the real bridge binary once and drive it as a
// subprocess, the way a newcomer would from a shell: every command runs in
// its own empty temp dir, so the embedded default (SQLite in
// ./bridge-data, in-process NATS server) is private to the test. The
// machine may run its own NATS server on 127.0.0.1:4222, the embedded
// default's port, so every command that starts or reaches the embedded
// server gets --nats-listen on a free port.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// bridgeBin is the binary built by TestMain.
var bridgeBin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "bridge-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "create temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bridgeBin = filepath.Join(dir, "bridge")
	// Stamped as a release stamps it (.goreleaser.yaml), so that the tests
	// see what `bridge version` and bridge_build_info report from -ldflags.
	build := exec.Command("go", "build", "-ldflags", buildinfoFlags, "-o", bridgeBin, ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "go build -o", bridgeBin, ".:", err)
		return 1
	}
	return m.Run()
}

// commandTimeout bounds every command a test runs to completion, so that a
// hang fails the test instead of the whole run.
const commandTimeout = 60 * time.Second

// result is a finished command.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// environ is the parent's environment without BRIDGE_* variables, plus
// extra (NAME=VALUE): the machine's configuration must not leak into a test.
func environ(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BRIDGE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// command prepares the bridge binary with args in dir.
func command(ctx context.Context, dir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bridgeBin, args...)
	cmd.Dir = dir
	cmd.Env = environ(env...)
	return cmd
}

// runBridge runs the binary to completion in dir with args and returns its
// exit code and output. A command that does not finish within
// commandTimeout fails the test.
func runBridge(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := command(ctx, dir, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
	require.NoError(t, ctx.Err(), "bridge %s did not finish within %s\n%s", strings.Join(args, " "), commandTimeout, r)
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		require.NoError(t, err, "bridge %s", strings.Join(args, " "))
	}
	return r
}

// process is a bridge command running in the background.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *bridgetest.SyncBuffer
	done           chan struct{} // closed when the process has exited
	code           int           // valid after done
}

// start runs the binary in the background in dir. Its stdout is read
// through a pipe; the process is killed and reaped when the test ends.
func start(t *testing.T, dir string, env []string, args ...string) *process {
	t.Helper()
	p := &process{stdout: &bridgetest.SyncBuffer{}, stderr: &bridgetest.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = command(context.Background(), dir, env, args...)
	p.cmd.Stderr = p.stderr
	pipe, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start(), "start bridge %s", strings.Join(args, " "))
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(p.stdout, pipe)
	}()
	go func() {
		<-copied // Wait closes the pipe: read everything first
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("bridge %s (exit %d)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), p.code, p.stdout, p.stderr)
		}
	})
	return p
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits at most d for the process to exit and returns its exit code.
func (p *process) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		require.FailNow(t, "process did not exit", "bridge %s still running after %s", strings.Join(p.cmd.Args[1:], " "), d)
		return -1
	}
}

// poll calls cond on the test goroutine until it returns true, failing the
// test when d passes first. cond may use require.
func poll(t *testing.T, d time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			require.FailNow(t, fmt.Sprintf("condition not met within %s", d), msgAndArgs...)
		case <-tick.C:
		}
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// logRecords parses the JSON log lines of stderr; other lines are skipped.
func logRecords(stderr string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(stderr, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// runWaiting starts `bridge run` with args while one of its dependencies
// cannot be used: the relay must keep running, log its attempts, answer
// /healthz 200 and /readyz 503. It waits until stderr holds every string
// of want, checks the probes, stops the relay with SIGTERM (exit 0) and
// returns its output.
func runWaiting(t *testing.T, dir string, env []string, args []string, want ...string) result {
	t.Helper()
	p := start(t, dir, env, args...)
	var addr string
	poll(t, 60*time.Second, func() bool {
		require.False(t, p.exited(), "bridge run exited (%d) instead of waiting\nstderr:\n%s", p.code, p.stderr)
		stderr := p.stderr.String()
		for _, w := range want {
			if !strings.Contains(stderr, w) {
				return false
			}
		}
		for _, rec := range logRecords(stderr) {
			if rec["msg"] == "relay cannot start yet; trying again" {
				addr, _ = rec["http"].(string)
			}
		}
		return addr != ""
	}, "bridge run never logged %q while waiting\nstderr:\n%s", want, p.stderr)
	code, body := httpGet("http://" + addr + "/healthz")
	require.Equal(t, http.StatusOK, code, "/healthz while waiting: %s", body)
	code, body = httpGet("http://" + addr + "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, "/readyz while waiting: %s", body)
	require.Contains(t, body, "not running", "/readyz names what the relay waits for")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 30*time.Second), "bridge run after SIGTERM while waiting\nstderr:\n%s", p.stderr)
	return result{code: 0, stdout: p.stdout.String(), stderr: p.stderr.String()}
}

// statusDoc is the part of `bridge status --json` the tests read.
type statusDoc struct {
	Database string           `json:"database"`
	Table    string           `json:"table"`
	Rows     map[string]int64 `json:"rows"`
}

func status(t *testing.T, dir string, args ...string) statusDoc {
	t.Helper()
	r := runBridge(t, dir, nil, append([]string{"status", "--json"}, args...)...)
	require.Equal(t, 0, r.code, "bridge status --json\n%s", r)
	var doc statusDoc
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), "bridge status --json\n%s", r)
	return doc
}

// relay is a running `bridge run` with the embedded default and the
// addresses it listens on.
type relay struct {
	*process
	natsListen, httpListen string
}

// startRelay starts `bridge run` in dir on free loopback ports and waits
// until GET /readyz answers 200. A port taken by someone else between
// freePort and the relay's listen is retried with new ports.
func startRelay(t *testing.T, dir string) relay {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	for attempt := 1; ; attempt++ {
		r := relay{
			natsListen: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			httpListen: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		}
		r.process = start(t, dir, nil, "run", "--nats-listen", r.natsListen, "--http-listen", r.httpListen)
		ready := false
		poll(t, 30*time.Second, func() bool {
			if r.exited() {
				return true
			}
			resp, err := client.Get("http://" + r.httpListen + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
			return ready
		}, "GET /readyz never answered 200\nrun stderr:\n%s", r.stderr)
		if ready {
			return r
		}
		if attempt < 3 && strings.Contains(r.stderr.String(), "address already in use") {
			t.Logf("bridge run lost its port to another process, retrying: %s", r.stderr)
			continue
		}
		require.FailNow(t, "bridge run exited before it was ready", "exit %d\nstderr:\n%s", r.code, r.stderr)
	}
}

func TestNewcomerFlow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := startRelay(t, dir)
	natsListen := run.natsListen

	tail := start(t, dir, nil, "tail", "--subject", "events.>", "--nats-listen", natsListen)
	poll(t, 30*time.Second, func() bool {
		require.False(t, tail.exited(), "bridge tail exited early with %d\nstderr:\n%s", tail.code, tail.stderr)
		return strings.Contains(tail.stderr.String(), "tailing")
	}, "bridge tail never said it is tailing\nstderr:\n%s", tail.stderr)

	r := runBridge(t, dir, nil, "enqueue", "--subject", "events.demo", "--data", "hello", "--header", "X-Demo=1", "--nats-listen", natsListen)
	require.Equal(t, 0, r.code, "bridge enqueue\n%s", r)
	require.Contains(t, r.stdout, "enqueued row 1")

	// tail prints one block per message, starting with "--- ".
	var block string
	poll(t, 30*time.Second, func() bool {
		for _, b := range strings.Split(tail.stdout.String(), "--- ") {
			if strings.Contains(b, "\nhello\n") {
				block = b
				return true
			}
		}
		return false
	}, "bridge tail never showed the message\nstdout:\n%s", tail.stdout)
	require.Contains(t, block, "events.demo")
	require.Contains(t, block, "\nNats-Msg-Id: ")
	require.Contains(t, block, "\nOutbox-Id: 1\n")
	require.Contains(t, block, "\nX-Demo: 1\n")

	// The mark after the PubAck is batched: poll until the row is done.
	poll(t, 30*time.Second, func() bool {
		return status(t, dir).Rows["done"] == 1
	}, "the row never became done")

	require.NoError(t, run.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, run.wait(t, 30*time.Second), "bridge run after SIGTERM\nstderr:\n%s", run.stderr)

	var outboxPath, clientURL, stream bool
	for _, rec := range logRecords(run.stderr.String()) {
		if s, _ := rec["outbox"].(string); strings.Contains(s, filepath.Join("bridge-data", "outbox.db")) {
			outboxPath = true
		}
		if s, _ := rec["client_url"].(string); s == "nats://"+natsListen {
			clientURL = true
		}
		if rec["stream"] == "EVENTS" || strings.Contains(fmt.Sprint(rec["streams"]), "EVENTS") {
			stream = true
		}
	}
	require.True(t, outboxPath, "run's log never names the outbox bridge-data/outbox.db\n%s", run.stderr)
	require.True(t, clientURL, "run's log never names the NATS client URL nats://%s\n%s", natsListen, run.stderr)
	require.True(t, stream, "run's log never names the stream EVENTS\n%s", run.stderr)
}

// TestStopWhileStarting sends SIGTERM as soon as the relay has logged its
// first line, usually while it is still starting the embedded NATS server
// or connecting: a stop requested during startup is a clean stop too.
func TestStopWhileStarting(t *testing.T) {
	t.Parallel()
	// Port 0: the test never reaches the server, and no other process can
	// take the port between choosing and listening.
	run := start(t, t.TempDir(), nil, "run", "--nats-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
	// The signal handler is installed before anything is logged.
	poll(t, 30*time.Second, func() bool {
		require.False(t, run.exited(), "bridge run exited early with %d\nstderr:\n%s", run.code, run.stderr)
		return strings.Contains(run.stderr.String(), `"level"`)
	}, "bridge run never logged\nstderr:\n%s", run.stderr)
	require.NoError(t, run.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, run.wait(t, 30*time.Second), "bridge run after an early SIGTERM\nstderr:\n%s", run.stderr)
	require.NotContains(t, run.stderr.String(), `"level":"ERROR"`)
}

func TestPortTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	taken := l.Addr().String()

	run := start(t, t.TempDir(), nil, "run", "--nats-listen", taken, "--http-listen", "127.0.0.1:0")
	code := run.wait(t, 30*time.Second)
	require.NotEqual(t, 0, code, "bridge run on a taken port\nstderr:\n%s", run.stderr)
	stderr := run.stderr.String()
	require.Contains(t, stderr, "address already in use")
	require.Contains(t, stderr, taken)
	require.Contains(t, stderr, "--nats-listen")
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		// yaml, when set, is written to bridge.yaml in the working directory.
		yaml string
		want []string // fragments of stderr
		// absent, when set, is a path in the working directory that the
		// command must not have created.
		absent string
		// unwanted are fragments stderr must not hold.
		unwanted []string
		// migrated runs bridge migrate in the working directory first (the
		// table outbox in other.db).
		migrated bool
		// embedded runs bridge migrate on the embedded default first (the
		// table outbox in bridge-data/outbox.db).
		embedded bool
	}{
		{name: "unknown command", args: []string{"frobnicate"}, want: []string{"unknown command", "frobnicate"}},
		{name: "unknown flag", args: []string{"run", "--frob"}, want: []string{"unknown flag", "--frob"}},
		{
			name: "database url scheme", args: []string{"status", "--database-url", "mongodb://x"},
			want: []string{"database.url", "mongodb://x", "postgres://", "sqlite:"},
		},
		{name: "database url bad port", args: []string{"status", "--database-url", "postgres://u:pw1@127.0.0.1:notaport/db"}, want: []string{"database.url", `invalid port ":notaport"`}},
		{name: "database url bad sslmode", args: []string{"status", "--database-url", "postgres://u:pw1@127.0.0.1:1/db?sslmode=bogus"}, want: []string{"invalid database URL", "sslmode is invalid"}},
		{name: "database url sqlite without path", args: []string{"status", "--database-url", "sqlite:"}, want: []string{"database.url", "must name a file"}},
		{name: "database url sqlite:// without path", args: []string{"run", "--check-config", "--database-url", "sqlite://"}, want: []string{"database.url", `"sqlite://"`, "must name a file"}},
		{name: "table with dash", args: []string{"status", "--table", "out-box"}, want: []string{"database.table", "out-box"}},
		{name: "unknown source", args: []string{"run", "--check-config", "--source", "kafka"}, want: []string{"source", "kafka", "postgres-wal"}},
		{name: "postgres-wal on the embedded default", args: []string{"run", "--check-config", "--source", "postgres-wal"}, want: []string{"database.url", "embedded default", "--database-url"}},
		{name: "status on a missing data dir", args: []string{"status", "--data-dir", "no-such-dir"}, want: []string{"no outbox database at no-such-dir/outbox.db", "--data-dir"}},
		{name: "purge on a missing sqlite file", args: []string{"purge", "--done-older-than", "1h", "--database-url", "sqlite:nope.db"}, want: []string{"no outbox database at nope.db"}},
		{name: "schema with sqlite", args: []string{"status", "--table", "app.outbox"}, want: []string{"database.table", "app.outbox", "no schemas"}},
		{name: "table with two dots", args: []string{"status", "--table", "a.b.c"}, want: []string{"database.table", "a.b.c"}},
		{name: "table with semicolon", args: []string{"status", "--table", "x;drop"}, want: []string{"database.table", "x;drop"}},
		{name: "table a reserved word", args: []string{"migrate", "--table", "select"}, want: []string{"database.table", `"select" is a reserved word`}},
		{name: "table a MySQL 8 reserved word", args: []string{"migrate", "--table", "rank"}, want: []string{"database.table", `"rank" is a reserved word`}},
		{name: "table named as a version table", args: []string{"migrate", "--table", "shop_outbox_migrations"}, want: []string{"database.table", "ends in _migrations"}},
		{name: "table too long", args: []string{"migrate", "--table", strings.Repeat("t", 50)}, want: []string{"database.table", "is 50 bytes; at most 49"}},
		{
			name: "wildcard subject", args: []string{"enqueue", "--subject", "events.*", "--data", "x"},
			want: []string{"--subject", "events.*", "wildcard"},
		},
		{name: "subject with space", args: []string{"enqueue", "--subject", "events.bad subject"}, want: []string{"--subject", "events.bad subject"}},
		{name: "no subject", args: []string{"enqueue"}, want: []string{"required flag", "subject"}},
		{name: "subject not UTF-8", args: []string{"enqueue", "--subject", "events.\xff"}, want: []string{"--subject", "not valid UTF-8"}},
		{name: "tail subject with space", args: []string{"tail", "--subject", "events.a b"}, want: []string{"--subject", "events.a b", "not a valid subject"}},
		{name: "tail empty subject", args: []string{"tail", "--subject", ""}, want: []string{"--subject", "not a valid subject"}},
		{name: "tail > not last", args: []string{"tail", "--subject", "events.>.x"}, want: []string{"events.>.x", "not a valid subject"}},
		{name: "header without value", args: []string{"enqueue", "--subject", "events.x", "--header", "nonsense"}, want: []string{"--header", "nonsense", "NAME=VALUE"}},
		{name: "header value not UTF-8", args: []string{"enqueue", "--subject", "events.x", "--header", "X=\xff"}, want: []string{"--header", "not valid UTF-8"}},
		{name: "rollup header", args: []string{"enqueue", "--subject", "events.h", "--header", "Nats-Rollup=all"}, want: []string{"--header", `"Nats-Rollup"`, "reserved for the JetStream server"}},
		{name: "ttl header any case", args: []string{"enqueue", "--subject", "events.h", "--header", "nats-ttl=1s"}, want: []string{"--header", `"nats-ttl"`, "reserved for the JetStream server"}},
		{name: "expected stream header", args: []string{"enqueue", "--subject", "events.h", "--header", "Nats-Expected-Stream=OTHER"}, want: []string{"--header", `"Nats-Expected-Stream"`, "reserved"}},
		{name: "msg id header", args: []string{"enqueue", "--subject", "events.h", "--header", "Nats-Msg-Id=x"}, want: []string{"--header", `"Nats-Msg-Id"`, "set by the relay"}},
		{name: "empty ordering key", args: []string{"enqueue", "--subject", "events.x", "--ordering-key", ""}, want: []string{"--ordering-key is empty"}},
		{name: "key too long", args: []string{"enqueue", "--subject", "events.x", "--key", strings.Repeat("k", 1025)}, want: []string{"--key", "is 1025 bytes", "at most 1024 bytes"}},
		{name: "key with LF", args: []string{"enqueue", "--subject", "events.x", "--key", "nl\nkey"}, want: []string{"--key", `"nl\nkey"`, "control character", "Outbox-Idempotency-Key"}},
		{name: "key with CR", args: []string{"enqueue", "--subject", "events.x", "--key", "cr\rkey"}, want: []string{"--key", "control character"}},
		{name: "key not UTF-8", args: []string{"enqueue", "--subject", "events.x", "--key", "k\xff"}, want: []string{"--key", "not valid UTF-8"}},
		{
			name: "negative inflight timeout", args: []string{"run", "--check-config", "--inflight-timeout", "-1s"},
			want: []string{"relay.inflight_timeout", "-1s"},
		},
		{
			name: "unknown yaml key", args: []string{"run", "--check-config", "--config", "bridge.yaml"},
			yaml: "relay:\n  batch_size: 10\n  bogus_key: 1\n", want: []string{"relay.bogus_key", "unknown key"},
		},
		{
			name: "inflight timeout beyond the embedded stream's window", args: []string{"run", "--check-config", "--inflight-timeout", "1h"},
			want: []string{"relay.inflight_timeout", `"1h"`, "at most 1m55s", "embedded default stream EVENTS"},
		},
		{
			name: "duplicates longer than max age", args: []string{"run", "--check-config", "--config", "bridge.yaml"},
			yaml: "streams:\n  - name: EVENTS\n    subjects: [\"events.>\"]\n    duplicates: 1m\n    max_age: 1s\n",
			want: []string{"streams[0].duplicates", `"1m"`, "streams[0].max_age (1s)"},
		},
		{
			name: "missing creds file", args: []string{"run", "--check-config", "--config", "bridge.yaml"},
			yaml: "nats:\n  creds_file: /nonexistent/user.creds\n", want: []string{"nats.creds_file", "/nonexistent/user.creds", "no such file"},
		},
		{
			name: "missing creds file, run", args: []string{"run", "--config", "bridge.yaml"},
			yaml: "nats:\n  creds_file: /nonexistent/user.creds\n", want: []string{"nats.creds_file", "/nonexistent/user.creds", "no such file"},
		},
		{
			name: "missing tls key file", args: []string{"run", "--check-config", "--config", "bridge.yaml"},
			yaml: "nats:\n  tls:\n    cert_file: /nonexistent/c.pem\n    key_file: /nonexistent/k.pem\n", want: []string{"nats.tls.cert_file", "/nonexistent/c.pem"},
		},
		{
			name: "missing nkey seed file, tail", args: []string{"tail", "--subject", "events.>", "--config", "bridge.yaml"},
			yaml: "nats:\n  nkey_seed_file: /nonexistent/seed\n", want: []string{"nats.nkey_seed_file", "/nonexistent/seed"},
		},
		{
			name: "run on a missing sqlite file", args: []string{"run", "--database-url", "sqlite:new/outbox.db"}, absent: "new",
			want: []string{"no outbox database at new/outbox.db", "bridge migrate --database-url sqlite:new/outbox.db creates it"},
		},
		{
			name: "check-config on a missing sqlite file", args: []string{"run", "--check-config", "--database-url", "sqlite:new.db"}, absent: "new.db",
			want: []string{"no outbox database at new.db", "bridge migrate --database-url sqlite:new.db"},
		},
		{
			name: "enqueue on a missing sqlite file", args: []string{"enqueue", "--subject", "events.x", "--database-url", "sqlite:new.db"}, absent: "new.db",
			want: []string{"no outbox database at new.db", "bridge migrate --database-url sqlite:new.db"},
		},
		{name: "run on sqlite in memory", args: []string{"run", "--database-url", "sqlite::memory:"}, want: []string{"sqlite::memory:", "in-memory SQLite database", "name a file"}},
		{name: "enqueue on sqlite in memory", args: []string{"enqueue", "--subject", "events.x", "--database-url", "sqlite::memory:"}, want: []string{"in-memory SQLite database"}},
		{name: "positional argument", args: []string{"run", "extra-arg"}, want: []string{"bridge run takes no arguments", "extra-arg", "(see bridge run --help)"}},
		{name: "positional argument to status", args: []string{"status", "extra-arg"}, want: []string{`bridge status takes no arguments, got "extra-arg" (see bridge status --help)`}},
		{name: "positional arguments to enqueue", args: []string{"enqueue", "--subject", "events.x", "a", "b"}, want: []string{`got "a b" (see bridge enqueue --help)`}},
		{name: "unknown flag of status", args: []string{"status", "--frob"}, want: []string{"unknown flag: --frob (see bridge status --help)"}},
		// A table that is not there is a configuration mistake like any other.
		{name: "status on a table not migrated", args: []string{"status", "--database-url", "sqlite:other.db", "--table", "nosuch"}, migrated: true, want: []string{`table "nosuch"`, "bridge migrate"}},
		{name: "retry on a table not migrated", args: []string{"retry", "--database-url", "sqlite:other.db", "--table", "nosuch", "--id", "1"}, migrated: true, want: []string{`table "nosuch"`, "bridge migrate"}},
		{name: "purge on a table not migrated", args: []string{"purge", "--database-url", "sqlite:other.db", "--table", "nosuch", "--done-older-than", "1h"}, migrated: true, want: []string{`table "nosuch"`, "bridge migrate"}},
		{name: "enqueue on a table not migrated", args: []string{"enqueue", "--database-url", "sqlite:other.db", "--table", "nosuch", "--subject", "events.x"}, migrated: true, want: []string{`table "nosuch"`, "bridge migrate"}},
		// A mistyped --table on the embedded default is named, not created
		// empty (before, these exited 0 with a new, empty table).
		{name: "status on a mistyped table of the embedded default", args: []string{"status", "--table", "nosuch"}, embedded: true, want: []string{`table "nosuch"`, "bridge migrate"}},
		{name: "retry on a mistyped table of the embedded default", args: []string{"retry", "--table", "nosuch", "--all-failed"}, embedded: true, want: []string{`table "nosuch"`, "bridge migrate"}},
		{name: "requeue on a mistyped table of the embedded default", args: []string{"requeue", "--table", "nosuch", "--older-than", "5m"}, embedded: true, want: []string{`table "nosuch"`, "bridge migrate"}},
		{name: "purge on a mistyped table of the embedded default", args: []string{"purge", "--table", "nosuch", "--done-older-than", "1h"}, embedded: true, want: []string{`table "nosuch"`, "bridge migrate"}},
		{name: "enqueue on a mistyped table of the embedded default", args: []string{"enqueue", "--table", "nosuch", "--subject", "events.x"}, embedded: true, want: []string{"no outbox table nosuch", "bridge migrate --table nosuch"}},
		{name: "enqueue on a mistyped table of a new embedded default", args: []string{"enqueue", "--table", "nosuch", "--subject", "events.x"}, absent: "bridge-data", want: []string{"no outbox table nosuch", "bridge migrate --table nosuch"}},
		// An error about a value given by flag names the flag, not a YAML path.
		{
			name: "ensure-stream bad subject", args: []string{"run", "--check-config", "--ensure-stream", "EVENTS:events.a,bad subj"},
			want: []string{`--ensure-stream EVENTS:events.a,bad subj (subject 2): "bad subj": must be a NATS subject`}, unwanted: []string{"streams["},
		},
		{
			name: "ensure-stream bad name", args: []string{"run", "--check-config", "--ensure-stream", "bad name:events.a"},
			want: []string{"--ensure-stream bad name:events.a (the name)", "JetStream stream name"}, unwanted: []string{"streams["},
		},
		{
			name: "ensure-stream overlap", args: []string{"run", "--check-config", "--ensure-stream", "EVENTS:a", "--ensure-stream", "OTHER:a"},
			want: []string{"--ensure-stream OTHER:a (subject 1)", "must not overlap --ensure-stream EVENTS:a (subject 1)"}, unwanted: []string{"streams["},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tt.yaml != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "bridge.yaml"), []byte(tt.yaml), 0o600))
			}
			if tt.migrated {
				r := runBridge(t, dir, nil, "migrate", "--database-url", "sqlite:other.db")
				require.Equal(t, 0, r.code, "bridge migrate\n%s", r)
			}
			if tt.embedded {
				r := runBridge(t, dir, nil, "migrate")
				require.Equal(t, 0, r.code, "bridge migrate\n%s", r)
			}
			args := tt.args
			if args[0] == "run" {
				// Should a case wrongly start the relay, it must not collide
				// with the machine's NATS server or another test.
				args = slices.Concat(args, []string{"--nats-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--http-listen", "127.0.0.1:0"})
			}
			r := runBridge(t, dir, nil, args...)
			require.Equal(t, 2, r.code, "bridge %s\n%s", strings.Join(args, " "), r)
			require.NotContains(t, r.stderr, "pw1", "a password in a bad database URL is redacted")
			for _, w := range tt.unwanted {
				require.NotContains(t, r.stderr, w, "bridge %s\n%s", strings.Join(args, " "), r)
			}
			for _, w := range tt.want {
				require.Contains(t, r.stderr, w, "bridge %s\n%s", strings.Join(args, " "), r)
			}
			require.NotContains(t, r.stderr, "Usage:", "bad input is told in one line, not with the usage")
			if tt.absent != "" {
				require.NoFileExists(t, filepath.Join(dir, tt.absent), "bridge %s created it", strings.Join(args, " "))
				require.NoDirExists(t, filepath.Join(dir, tt.absent), "bridge %s created it", strings.Join(args, " "))
			}
		})
	}
}

// TestPositionalArgumentsRefused: every command takes flags only; an
// argument is refused in one line, as an unknown flag is.
func TestPositionalArgumentsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range newRootCommand().Commands() {
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			r := runBridge(t, t.TempDir(), nil, c.Name(), "extra-arg")
			require.Equal(t, 2, r.code, "%s", r)
			want := fmt.Sprintf("bridge: bridge %s takes no arguments, got %q (see bridge %s --help)\n", c.Name(), "extra-arg", c.Name())
			require.Equal(t, want, r.stderr)
			require.Empty(t, r.stdout)
		})
	}
}

// TestExplicitSQLiteFileComesFromMigrate: run and enqueue do not create a
// SQLite file named by --database-url; bridge migrate does, and then they
// work on it.
func TestExplicitSQLiteFileComesFromMigrate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite:" + filepath.Join(dir, "db", "outbox.db")
	enqueue := []string{"enqueue", "--database-url", url, "--subject", "events.x", "--data", "x"}

	r := runBridge(t, dir, nil, enqueue...)
	require.Equal(t, 2, r.code, "%s", r)
	require.NoDirExists(t, filepath.Join(dir, "db"))
	r = runBridge(t, dir, nil, "status", "--database-url", url)
	require.Equal(t, 2, r.code, "the refused enqueue left no file for status to find\n%s", r)
	require.Contains(t, r.stderr, "no outbox database at")

	r = runBridge(t, dir, nil, "migrate", "--database-url", url)
	require.Equal(t, 0, r.code, "%s", r)
	require.FileExists(t, filepath.Join(dir, "db", "outbox.db"))
	r = runBridge(t, dir, nil, enqueue...)
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "enqueued row 1")
	r = runBridge(t, dir, nil, "run", "--check-config", "--database-url", url)
	require.Equal(t, 0, r.code, "%s", r)
}

// TestIgnoredVariables: a BRIDGE_ variable that names no key is reported
// as misspelled; one that names streams, a real key without a variable,
// says where streams are set instead.
func TestIgnoredVariables(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := []string{"BRIDGE_STREAMS=EVENTS:events.>", "BRIDGE_RELAY_BATCHSIZE=5"}

	r := runBridge(t, dir, env, "config")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stderr, "warning: ignoring variable BRIDGE_STREAMS: streams has no environment variable; set it in the YAML file (--config) or with --ensure-stream")
	require.Contains(t, r.stderr, "warning: ignoring unknown variable BRIDGE_RELAY_BATCHSIZE (misspelled?)")
	require.NotContains(t, r.stderr, "BRIDGE_STREAMS (misspelled?)")

	r = runBridge(t, dir, env, "enqueue", "--subject", "events.x")
	require.Equal(t, 0, r.code, "%s", r)
	var streams, batch map[string]any
	for _, rec := range logRecords(r.stderr) {
		switch rec["variable"] {
		case "BRIDGE_STREAMS":
			streams = rec
		case "BRIDGE_RELAY_BATCHSIZE":
			batch = rec
		}
	}
	require.NotNil(t, streams, r.stderr)
	require.Equal(t, "WARN", streams["level"])
	require.Equal(t, "ignoring BRIDGE_ variable", streams["msg"])
	require.Contains(t, streams["reason"], "--ensure-stream")
	require.NotNil(t, batch, r.stderr)
	require.Contains(t, batch["msg"], "misspelled?")
}

func TestMissingTablePostgres(t *testing.T) {
	t.Parallel()
	// A fresh schema (t_<random>), dropped when the test ends.
	url, table := bridgetest.PostgresTable(t)
	dir := t.TempDir()
	flags := []string{"--database-url", url, "--table", table}

	r := runBridge(t, dir, nil, append([]string{"status"}, flags...)...)
	require.NotEqual(t, 0, r.code, "bridge status on a missing table\n%s", r)
	require.Contains(t, r.stderr, "bridge migrate", "bridge status on a missing table\n%s", r)

	r = runBridge(t, dir, nil, append([]string{"migrate"}, flags...)...)
	require.Equal(t, 0, r.code, "bridge migrate\n%s", r)
	require.Contains(t, r.stdout, "applied migration")
	require.Contains(t, r.stdout, table)

	r = runBridge(t, dir, nil, append([]string{"migrate"}, flags...)...)
	require.Equal(t, 0, r.code, "second bridge migrate\n%s", r)
	require.Contains(t, r.stdout, "up to date")

	r = runBridge(t, dir, nil, append([]string{"status"}, flags...)...)
	require.Equal(t, 0, r.code, "bridge status after migrate\n%s", r)
	require.Contains(t, r.stdout, table)
	require.NotContains(t, r.stderr, "older than this bridge", "bridge status after migrate\n%s", r)

	// A table migrated by an older bridge (without migration 00003 and
	// those after it): the commands work and say to migrate; migrate
	// applies the rest.
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	schema := strings.Split(table, ".")[0]
	_, err = db.Exec("DELETE FROM " + table + "_migrations WHERE version_id >= 3; DROP INDEX " + schema + ".outbox_unordered_idx")
	require.NoError(t, err)
	r = runBridge(t, dir, nil, append([]string{"status"}, flags...)...)
	require.Equal(t, 0, r.code, "bridge status on an older schema\n%s", r)
	require.Contains(t, r.stderr, "outbox schema is older than this bridge: run `bridge migrate`", "bridge status on an older schema\n%s", r)
	r = runBridge(t, dir, nil, append([]string{"migrate"}, flags...)...)
	require.Equal(t, 0, r.code, "bridge migrate of an older schema\n%s", r)
	require.Contains(t, r.stdout, "applied migration 00003")
	r = runBridge(t, dir, nil, append([]string{"status"}, flags...)...)
	require.NotContains(t, r.stderr, "older than this bridge", "bridge status after the second migrate\n%s", r)
}

func TestEnqueueSameKeyTwice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"enqueue", "--subject", "events.demo", "--key", "k1", "--data", "hello"}

	r := runBridge(t, dir, nil, args...)
	require.Equal(t, 0, r.code, "first enqueue\n%s", r)
	require.Contains(t, r.stdout, "enqueued row 1")

	r = runBridge(t, dir, nil, args...)
	require.Equal(t, 0, r.code, "second enqueue\n%s", r)
	require.Contains(t, r.stdout, "already enqueued")
	require.Contains(t, r.stdout, "k1")

	doc := status(t, dir)
	require.Equal(t, int64(1), doc.Rows["pending"], "status %+v", doc)
	var total int64
	for _, n := range doc.Rows {
		total += n
	}
	require.Equal(t, int64(1), total, "status %+v", doc)
}

// TestEnqueueRefusesPayloadOverEmbeddedMaxPayload: with the embedded NATS
// server, whose max_payload (1 MiB) is known, a payload that cannot fit it
// with its message's headers is refused; the relay would make the row a
// dead letter.
func TestEnqueueRefusesPayloadOverEmbeddedMaxPayload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	require.NoError(t, os.WriteFile(big, bytes.Repeat([]byte("x"), 1<<20), 0o600))
	r := runBridge(t, dir, nil, "enqueue", "--subject", "events.demo", "--data-file", big)
	require.Equal(t, 2, r.code, "enqueue of 1 MiB\n%s", r)
	require.Contains(t, r.stderr, "over the NATS server's max_payload of 1048576 bytes")
	r = runBridge(t, dir, nil, "enqueue", "--subject", "events.demo", "--data", "small")
	require.Equal(t, 0, r.code, "enqueue of a small payload\n%s", r)
}

func TestConfigRedacts(t *testing.T) {
	t.Parallel()
	r := runBridge(t, t.TempDir(), []string{
		"BRIDGE_DATABASE_URL=postgres://u:sup3rsecret@127.0.0.1:1/db",
		"BRIDGE_NATS_TOKEN=t0ken-secret",
	}, "config")
	require.Equal(t, 0, r.code, "bridge config\n%s", r)
	out := r.stdout + r.stderr
	require.NotContains(t, out, "sup3rsecret")
	require.NotContains(t, out, "t0ken-secret")
	require.Contains(t, r.stdout, "REDACTED")
	require.Contains(t, r.stdout, "postgres://u:REDACTED@127.0.0.1:1/db", "the URL stays readable apart from its password")
}
