package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// pgRecvLogical returns the path of PostgreSQL's pg_recvlogical: on the
// PATH, in PG_BINDIR, or the newest /usr/lib/postgresql/<major>/bin. The
// test is skipped without it, except under CI.
func pgRecvLogical(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("pg_recvlogical"); err == nil {
		return p
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if d := os.Getenv("PG_BINDIR"); d != "" {
		dirs = append(dirs, d)
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		if p := filepath.Join(d, "pg_recvlogical"); fileExists(p) {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("pg_recvlogical not found (PATH, PG_BINDIR, /usr/lib/postgresql/*/bin)")
	}
	t.Skip("pg_recvlogical not found (PATH, PG_BINDIR, /usr/lib/postgresql/*/bin)")
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// waitSlotActive waits until a connection streams from the slot, or (want
// false) none does.
func (e *walEnv) waitSlotActive(t *testing.T, want bool) {
	t.Helper()
	poll(t, 30*time.Second, func() bool {
		var active bool
		require.NoError(t, e.db.QueryRow(`SELECT active FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&active))
		return active == want
	}, "slot %s never became active=%v", e.slot, want)
}

// verifyOnce checks that rows [0, total) are all done and that the stream
// holds exactly one message for each (in any order: rows the sweep
// publishes follow the rows read from the slot).
func (e *walEnv) verifyOnce(t *testing.T, total int) {
	t.Helper()
	require.Equal(t, total, e.count(t, "done"), "every row ends done")
	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	require.Len(t, msgs, total, "the stream holds exactly one message per row")
	seen := map[string]bool{}
	for _, m := range msgs {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		require.False(t, seen[id], "message %s twice", id)
		seen[id] = true
	}
}

// stallEnv is the stall watch of the postgres-wal tests: short, with a
// short sweep, so that rows the slot will not deliver are swept at once.
var stallEnv = []string{"BRIDGE_LOG_LEVEL=info", "BRIDGE_RELAY_STALL_AFTER=1s", "BRIDGE_RELAY_STALL_UNHEALTHY_AFTER=2s", "BRIDGE_WAL_SWEEP_INTERVAL=1s"}

// TestWALStandbyBehindAForeignSlotHolderIsStalled: pg_recvlogical holds
// the relay's slot, so the relay waits as a standby while 200 rows stay
// pending. The relay says so: bridge_relay_stalled_seconds > 0, one log
// line naming the holder (its pid and application_name), /readyz 200
// naming the standby and the holder, bridge_wal_slot_lag_seconds the age
// of the oldest waiting row; /healthz stays 200 (restarting a standby
// cannot free a slot a foreign process holds). Once pg_recvlogical stops,
// the relay takes the slot and every row is relayed once (the rows
// pg_recvlogical consumed by the sweep), and the stall ends.
func TestWALStandbyBehindAForeignSlotHolderIsStalled(t *testing.T) {
	t.Parallel()
	e := newWALEnv(t)
	rl := exec.Command(pgRecvLogical(t), "--dbname", e.dbURL, "--slot", e.slot, "--start", "--file", filepath.Join(t.TempDir(), "recv.out"),
		"--option", "proto_version=1", "--option", "publication_names="+e.publication, "--status-interval", "1", "--fsync-interval", "1", "--no-loop")
	rl.Stderr = &bridgetest.SyncBuffer{}
	require.NoError(t, rl.Start())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = rl.Process.Kill()
			_ = rl.Wait()
		}
	})
	e.waitSlotActive(t, true)

	p := e.run(t, stallEnv...)
	base := "http://" + relayHTTPAddr(t, p)
	poll(t, 30*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), "replication slot in use by another process")
	}, "the relay never said it waits for the slot")
	e.insert(t, 0, 200)

	poll(t, 30*time.Second, func() bool {
		v, _ := metric(metricsText(t, base), "bridge_relay_stalled_seconds")
		return v > 0
	}, "bridge_relay_stalled_seconds stayed 0 while 200 rows waited behind pg_recvlogical")
	require.Zero(t, e.count(t, "done"), "nothing relays while pg_recvlogical holds the slot")
	code, body := httpGet(base + "/readyz")
	require.Equal(t, http.StatusOK, code, "a standby is ready: %s", body)
	require.Contains(t, body, "standby", "/readyz names the standby state: %s", body)
	require.Contains(t, body, "pg_recvlogical", "/readyz names the slot's holder: %s", body)
	poll(t, 15*time.Second, func() bool { // read every 5 s
		lag, _ := metric(metricsText(t, base), "bridge_wal_slot_lag_seconds")
		return lag > 0
	}, "the slot lag of a standby is the age of the rows waiting, not 0")
	require.Contains(t, p.stderr.String(), "relay stalled")
	time.Sleep(3 * time.Second) // past relay.stall_unhealthy_after
	code, body = httpGet(base + "/healthz")
	require.Equal(t, http.StatusOK, code, "a standby's liveness holds: a restart cannot free the slot: %s", body)
	var stalls []map[string]any
	for _, rec := range logRecords(p.stderr.String()) {
		if strings.HasPrefix(rec["msg"].(string), "relay stalled") {
			stalls = append(stalls, rec)
		}
	}
	require.Len(t, stalls, 1, "one log line per stall\n%s", p.stderr)
	require.Contains(t, stalls[0]["cause"], "pg_recvlogical", "the log line names the holder: %v", stalls[0])
	require.Contains(t, stalls[0]["cause"], "pid ", "the log line names the holder's pid: %v", stalls[0])

	require.NoError(t, rl.Process.Signal(syscall.SIGINT))
	_ = rl.Wait()
	stopped = true
	e.waitDone(t, 200, 60*time.Second, p)
	e.verifyOnce(t, 200)
	poll(t, 30*time.Second, func() bool {
		v, _ := metric(metricsText(t, base), "bridge_relay_stalled_seconds")
		return v == 0
	}, "bridge_relay_stalled_seconds stayed above 0 once every row was relayed")
	code, body = httpGet(base + "/readyz")
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.NotContains(t, body, "standby", "%s", body)
	require.Contains(t, p.stderr.String(), "moves rows again after a stall")
}

// TestWALStandbyBehindAFrozenRelayIsStalled: relay a holds the slot and is
// frozen (SIGSTOP) while rows are written; relay b, its standby, says so
// (bridge_relay_stalled_seconds > 0, /readyz naming a's walsender and its
// application_name "bridge a") and keeps its liveness. Once a's walsender
// times out (wal_sender_timeout, 20 s for a's replication connection), b
// takes the slot over and relays every row once; the stall ends.
func TestWALStandbyBehindAFrozenRelayIsStalled(t *testing.T) {
	t.Parallel()
	e := newWALEnv(t)
	a := e.run(t, "BRIDGE_RELAY_OWNER=a", "BRIDGE_WAL_REPLICATION_URL="+e.dbURL+"&options=-c%20wal_sender_timeout%3D20s")
	e.insert(t, 0, 100)
	e.waitDone(t, 100, 30*time.Second, a)
	b := e.run(t, append([]string{"BRIDGE_RELAY_OWNER=b"}, stallEnv...)...)
	base := "http://" + relayHTTPAddr(t, b)
	poll(t, 30*time.Second, func() bool {
		return strings.Contains(b.stderr.String(), "replication slot in use by another process")
	}, "relay b never said it waits for the slot")

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
	frozen := time.Now()
	e.insert(t, 100, 300)
	poll(t, 15*time.Second, func() bool {
		v, _ := metric(metricsText(t, base), "bridge_relay_stalled_seconds")
		return v > 0
	}, "bridge_relay_stalled_seconds stayed 0 on the standby of a frozen relay")
	require.Less(t, time.Since(frozen), 10*time.Second, "the stall showed before a's walsender could time out")
	require.Equal(t, 100, e.count(t, "done"), "nothing relays while a is frozen")
	code, body := httpGet(base + "/readyz")
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.Contains(t, body, "standby", "%s", body)
	require.Contains(t, body, `bridge a`, "/readyz names the holder's application_name: %s", body)
	code, body = httpGet(base + "/healthz")
	require.Equal(t, http.StatusOK, code, "a standby's liveness holds: %s", body)

	e.waitDone(t, 300, 90*time.Second, b)
	kill(t, a)
	e.verifyOnce(t, 300)
	poll(t, 30*time.Second, func() bool {
		v, _ := metric(metricsText(t, base), "bridge_relay_stalled_seconds")
		return v == 0
	}, "bridge_relay_stalled_seconds stayed above 0 once every row was relayed")
}

// TestWALStalledRelayFailsLiveness: in the active role, rows read from the
// slot that the relay does not relay (its NATS server is gone) make it
// stalled after relay.stall_after and not alive after
// relay.stall_unhealthy_after, as with source: table; once NATS is back
// the rows flow and /healthz recovers. A long backoff (whose row holds
// the rows after it, in commit order) and an empty table never trip it.
func TestWALStalledRelayFailsLiveness(t *testing.T) {
	t.Parallel()

	t.Run("backoff and empty table", func(t *testing.T) {
		t.Parallel()
		e := newWALEnv(t)
		p := e.run(t, slices.Concat(stallEnv, []string{"BRIDGE_RELAY_BACKOFF_INITIAL=1h", "BRIDGE_RELAY_BACKOFF_MAX=2h"})...)
		base := "http://" + relayHTTPAddr(t, p)
		time.Sleep(3 * time.Second) // an empty table for longer than stall_after
		_, err := e.db.Exec(`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload) VALUES ('no-stream', 'orders.created', '\x00')`)
		require.NoError(t, err)
		e.insert(t, 0, 10) // behind it, in commit order
		poll(t, 30*time.Second, func() bool { return e.count(t, "failed") == 1 }, "the row without a stream never failed: %s", e.statuses(t))
		time.Sleep(5 * time.Second) // longer than stall_after + wal.sweep_interval + stall_unhealthy_after
		code, body := httpGet(base + "/healthz")
		require.Equal(t, http.StatusOK, code, "%s", body)
		v, ok := metric(metricsText(t, base), "bridge_relay_stalled_seconds")
		require.True(t, ok, "the postgres-wal relay has a stall gauge")
		require.Zero(t, v)
		require.NotContains(t, p.stderr.String(), "relay stalled")
	})

	t.Run("nothing relayed", func(t *testing.T) {
		t.Parallel()
		e := newWALEnv(t)
		p := e.run(t, stallEnv...)
		base := "http://" + relayHTTPAddr(t, p)
		e.insert(t, 0, 10)
		e.waitDone(t, 10, 30*time.Second, p)
		e.nats.Stop()
		e.insert(t, 10, 20)
		poll(t, 30*time.Second, func() bool {
			code, _ := httpGet(base + "/healthz")
			return code == http.StatusServiceUnavailable
		}, "/healthz never failed while rows read from the slot were not relayed")
		_, body := httpGet(base + "/healthz")
		require.Contains(t, body, "stalled")
		v, _ := metric(metricsText(t, base), "bridge_relay_stalled_seconds")
		require.Positive(t, v)
		require.Contains(t, p.stderr.String(), "relay stalled")

		e.nats.Restart(t)
		e.waitDone(t, 20, 60*time.Second, p)
		poll(t, 30*time.Second, func() bool {
			code, _ := httpGet(base + "/healthz")
			return code == http.StatusOK
		}, "/healthz never recovered once rows flowed again")
	})
}

// statuses counts the table's rows by status, for a failure message.
func (e *walEnv) statuses(t *testing.T) string {
	t.Helper()
	rows, err := e.db.Query(`SELECT status, count(*), min(id), coalesce(max(last_error), '') FROM ` + e.table + ` GROUP BY status ORDER BY status`)
	require.NoError(t, err)
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var status, lastErr string
		var n, id int
		require.NoError(t, rows.Scan(&status, &n, &id, &lastErr))
		fmt.Fprintf(&b, "%s: %d (from id %d) %s; ", status, n, id, lastErr)
	}
	return b.String()
}
