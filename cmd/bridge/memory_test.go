package main

// The relay's memory, measured on the real `bridge run` process: peak RSS
// (VmHWM) while it relays or dead-letters rows with large payloads. Rerun
// with `go test -run TestMemory -v ./cmd/bridge/` to see the figures; they
// are reported in README.md and deployments/README.md.

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// memoryCase is one measurement: rows of payloadBytes each, written to an
// outbox (kind "sqlite", "postgres", or "postgres-wal": PostgreSQL with
// wal_level = logical and source: postgres-wal) and relayed to a NATS
// server whose max_payload is 1 MiB.
type memoryCase struct {
	name         string
	kind         string
	rows         int
	payloadBytes int
	// relayed is whether the rows fit max_payload and reach the stream;
	// otherwise each becomes a dead letter.
	relayed bool
	// limitMiB is the bound on the relay's peak RSS.
	limitMiB int
}

// TestMemoryBoundedByBytes runs `bridge run` with its default settings
// over rows of large payloads and checks its peak RSS, read from
// /proc/<pid>/status (VmHWM) once every row is settled:
//   - 300 rows of 900 KB are relayed in less than 200 MiB: what the relay
//     holds is bounded in bytes (relay.max_in_flight_bytes), not only in
//     rows;
//   - 40 rows of 10 MB, over the server's max_payload, become dead letters
//     in less than 150 MiB: the claim reads their length, computed by the
//     database, and never their payload; so does one row of 200 MB.
//
// The bound is on memory, not on time, so it holds on a slow or loaded
// machine too: the relay holds less when it waits longer. The lease is
// longer than the default (see measureRelayMemory) and the wait for the
// rows generous, so that a loaded machine slows the test down without
// failing it.
func TestMemoryBoundedByBytes(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("peak RSS is read from /proc (Linux)")
	}
	for _, c := range []memoryCase{
		{name: "300 rows of 900 KB relayed", kind: "sqlite", rows: 300, payloadBytes: 900_000, relayed: true, limitMiB: 200},
		{name: "40 rows of 10 MB over max_payload", kind: "sqlite", rows: 40, payloadBytes: 10_000_000, limitMiB: 150},
		// On PostgreSQL: SQLite runs in the relay's process, and its UPDATE
		// of a row (the claim, the mark) rewrites the whole row, payload
		// included, in its own memory; a 200 MB row takes about 400 MiB
		// there (deployments/README.md, Sizing).
		{name: "one row of 200 MB over max_payload", kind: "postgres", rows: 1, payloadBytes: 200_000_000, limitMiB: 150},
		// source: postgres-wal holds what it read from the slot and has
		// not settled within relay.max_in_flight_bytes too. It cannot
		// leave a payload unread (the log sends whole rows), but drops one
		// over max_payload as soon as it is read.
		{name: "postgres-wal: 300 rows of 900 KB relayed", kind: "postgres-wal", rows: 300, payloadBytes: 900_000, relayed: true, limitMiB: 200},
		{name: "postgres-wal: 40 rows of 10 MB over max_payload", kind: "postgres-wal", rows: 40, payloadBytes: 10_000_000, limitMiB: 150},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			peak := measureRelayMemory(t, c)
			require.Less(t, peak, float64(c.limitMiB), "peak RSS of bridge run in MiB")
		})
	}
}

// measureRelayMemory writes the rows of c, runs `bridge run` until every
// row is settled and returns its peak RSS in MiB.
func measureRelayMemory(t *testing.T, c memoryCase) float64 {
	t.Helper()
	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) { o.MaxPayload = 1 << 20 })
	dir := t.TempDir()
	dbURL, table := bridgetest.SQLiteURL(t), "outbox"
	switch c.kind {
	case "postgres":
		dbURL, table = bridgetest.PostgresTable(t)
	case "postgres-wal":
		dbURL, table = bridgetest.PostgresLogicalTable(t)
	}
	// The settings are the defaults but for the lease: on a loaded machine
	// SQLite's UPDATE of a 10 MB row (the claim, the mark) can take longer
	// than the statement deadline of the default lease (a third of 30s, at least 5s),
	// the lease is lost and the rows go round again until the wait runs
	// out. A longer lease changes nothing the relay holds (what it holds is
	// bounded by relay.max_in_flight_bytes, whatever the lease), so the
	// bound on memory checked here is the same.
	env := []string{"BRIDGE_DATABASE_URL=" + dbURL, "BRIDGE_DATABASE_TABLE=" + table,
		"BRIDGE_NATS_URL=" + srv.ClientURL(), "BRIDGE_HTTP_LISTEN=127.0.0.1:0",
		"BRIDGE_RELAY_INFLIGHT_TIMEOUT=110s"}
	if c.kind == "postgres-wal" {
		slot, publication := bridgetest.WALNames(t, dbURL)
		env = append(env, "BRIDGE_SOURCE=postgres-wal", "BRIDGE_WAL_SLOT="+slot, "BRIDGE_WAL_PUBLICATION="+publication)
	}
	r := runBridge(t, dir, env, "migrate")
	require.Equal(t, 0, r.code, "bridge migrate\n%s", r)

	ctx := context.Background()
	db, err := outbox.Open(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	q := func(query string) string { // PostgreSQL's placeholders
		if c.kind != "sqlite" {
			for i := 1; strings.Contains(query, "?"); i++ {
				query = strings.Replace(query, "?", "$"+strconv.Itoa(i), 1)
			}
		}
		return strings.ReplaceAll(query, "outbox", table)
	}
	payload := make([]byte, c.payloadBytes)
	_, _ = rand.Read(payload) // incompressible, as most large payloads are
	tx, err := db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	for i := range c.rows {
		_, err := tx.ExecContext(ctx, q(`INSERT INTO outbox (idempotency_key, subject, payload) VALUES (?, ?, ?)`),
			"mem-"+strconv.Itoa(i), "events.mem", payload)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	payload = nil

	run := start(t, dir, env, "run", "--ensure-stream", "EVENTS:events.>")
	settled := outbox.StatusDone
	if !c.relayed {
		settled = outbox.StatusPermanentFailed
	}
	poll(t, 8*time.Minute, func() bool {
		require.False(t, run.exited(), "bridge run exited with %d\nstderr:\n%s", run.code, run.stderr)
		var n int
		require.NoError(t, db.SQL.QueryRowContext(ctx, q(`SELECT count(*) FROM outbox WHERE status = ?`), string(settled)).Scan(&n))
		return n == c.rows
	}, "the %d rows never all became %s\nstderr:\n%s", c.rows, settled, run.stderr)
	peak := float64(vmHWM(t, run.cmd.Process.Pid)) / 1024
	require.Contains(t, run.stderr.String(), `"msg":"Go memory limit`, "bridge run logs the Go runtime's memory limit")
	t.Logf("peak RSS of bridge run, %s, %d rows of %d bytes, default settings: %.1f MiB (bound %d MiB)",
		c.kind, c.rows, c.payloadBytes, peak, c.limitMiB)

	if !c.relayed {
		var lastError string
		require.NoError(t, db.SQL.QueryRowContext(ctx, q(`SELECT last_error FROM outbox LIMIT 1`)).Scan(&lastError))
		require.Contains(t, lastError, "max_payload", "a dead letter says why")
	}
	require.NoError(t, run.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, run.wait(t, 60*time.Second), "bridge run after SIGTERM\nstderr:\n%s", run.stderr)
	if c.relayed {
		_, js := (&bridgetest.NATS{Server: srv}).JetStream(t)
		s, err := js.Stream(ctx, "EVENTS")
		require.NoError(t, err)
		require.Equal(t, uint64(c.rows), s.CachedInfo().State.Msgs, "every row is in the stream")
	}
	return peak
}

// vmHWM reads the peak resident set size of process pid, in KiB.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	require.FailNow(t, "no VmHWM in /proc/<pid>/status")
	return 0
}
