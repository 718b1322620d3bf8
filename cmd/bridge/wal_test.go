package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Tests of source: postgres-wal with the real binary, against the logical
// test server (bridgetest.PostgresLogicalURL).

// walEnv is one outbox table on the logical test server, its slot and
// publication names, and the NATS the relays publish to.
type walEnv struct {
	crashEnv
	slot, publication string
	nats              *bridgetest.NATS
}

func newWALEnv(t *testing.T) *walEnv {
	t.Helper()
	return newWALEnvWindow(t, 2*time.Minute)
}

// newWALEnvWindow is newWALEnv with a stream EVENTS whose duplicate window
// is window.
func newWALEnvWindow(t *testing.T, window time.Duration) *walEnv {
	t.Helper()
	url, table := bridgetest.PostgresLogicalTable(t)
	slot, pub := bridgetest.WALNames(t, url)
	n := bridgetest.StartNATS(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	js := natsClient(t, n.URL())
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: window})
	require.NoError(t, err)
	e := &walEnv{crashEnv: crashEnv{dbURL: url, table: table, db: db, natsURL: n.URL(), js: js, dir: t.TempDir()}, slot: slot, publication: pub, nats: n}
	r := runBridge(t, e.dir, e.env(), "migrate")
	require.Zero(t, r.code, "%s", r)
	require.Contains(t, r.stdout, "created publication "+pub)
	require.Contains(t, r.stdout, "created replication slot "+slot)
	return e
}

// env is the configuration of every command of the test.
func (e *walEnv) env(extra ...string) []string {
	return append([]string{
		"BRIDGE_SOURCE=postgres-wal",
		"BRIDGE_DATABASE_URL=" + e.dbURL,
		"BRIDGE_DATABASE_TABLE=" + e.table,
		"BRIDGE_WAL_SLOT=" + e.slot,
		"BRIDGE_WAL_PUBLICATION=" + e.publication,
		"BRIDGE_NATS_URL=" + e.natsURL,
		"BRIDGE_HTTP_LISTEN=127.0.0.1:0",
		"BRIDGE_RELAY_INFLIGHT_TIMEOUT=3s",
		"BRIDGE_RELAY_ACK_DEADLINE=2s",
		"BRIDGE_RELAY_PUBLISH_TIMEOUT=1s",
		"BRIDGE_RELAY_BACKOFF_INITIAL=100ms",
		"BRIDGE_RELAY_BACKOFF_MAX=1s",
		"BRIDGE_SHUTDOWN_TIMEOUT=5s",
		"BRIDGE_LOG_LEVEL=warn",
	}, extra...)
}

func (e *walEnv) run(t *testing.T, extra ...string) *process {
	t.Helper()
	return start(t, e.dir, e.env(extra...), "run")
}

// verifyCommitOrder checks that the stream holds rows [0, total) once
// each, in id order: the test's one producer commits them in id order, so
// that is their commit order.
func (e *walEnv) verifyCommitOrder(t *testing.T, total int) {
	t.Helper()
	require.Equal(t, total, e.count(t, "done"), "every row ends done")
	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	require.Len(t, msgs, total, "the stream holds exactly one message per row")
	for i, m := range msgs {
		require.Equal(t, "k-"+strconv.Itoa(i), m.Headers().Get(jetstream.MsgIDHeader), "stream position %d", i)
		require.Equal(t, "row "+strconv.Itoa(i), string(m.Data()))
	}
}

// TestWALCrashSIGKILLAtRandomMoments: the relay is killed ten times while
// it relays 20,000 rows that a producer keeps committing, 100 rows per
// transaction. After the last relay caught up, every row is in the stream
// exactly once, in commit order, and done.
func TestWALCrashSIGKILLAtRandomMoments(t *testing.T) {
	t.Parallel()
	e := newWALEnv(t)
	const total = 20000
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < total; i += 100 {
			e.insert(t, i, i+100)
			time.Sleep(5 * time.Millisecond) // paced: the kills land among the commits
		}
	}()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 16))
	// No sweep: the rows must come from the slot alone.
	small := []string{"BRIDGE_RELAY_MAX_IN_FLIGHT=300", "BRIDGE_WAL_SWEEP_INTERVAL=1h"}
	for i := range 10 {
		p := e.run(t, small...)
		// A random moment: after some rows more are done, or a random
		// time after the start while the relay is catching up.
		target := min(e.count(t, "done")+1+rng.IntN(1500), total)
		deadline := time.Now().Add(time.Duration(200+rng.IntN(1500)) * time.Millisecond)
		poll(t, 60*time.Second, func() bool {
			require.False(t, p.exited(), "relay %d exited (%d)\nstderr:\n%s", i, p.code, p.stderr)
			return e.count(t, "done") >= target || time.Now().After(deadline)
		})
		kill(t, p)
	}
	<-produced
	t.Logf("after 10 kills: %d of %d rows done", e.count(t, "done"), total)
	final := e.run(t, "BRIDGE_WAL_SWEEP_INTERVAL=1h")
	e.waitDone(t, total, 120*time.Second, final)
	e.verifyCommitOrder(t, total)
}

// TestWALLevelReplicaRefused: on a server whose wal_level is replica,
// migrate and run refuse source postgres-wal with exit 2 and a message
// naming the setting, its value and how to change it.
func TestWALLevelReplicaRefused(t *testing.T) {
	t.Parallel()
	url, table := bridgetest.PostgresTable(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	var level string
	require.NoError(t, db.QueryRow("SHOW wal_level").Scan(&level))
	if level == "logical" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the server of %s has wal_level = logical: this test needs one with replica (.ci/run uses the machine's cluster for it)", bridgetest.PostgresURLEnv)
		}
		t.Skipf("the server of %s has wal_level = logical: this test needs one with replica", bridgetest.PostgresURLEnv)
	}
	ctx := context.Background()
	odb, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	defer odb.Close()
	_, err = outbox.Migrate(ctx, odb, table)
	require.NoError(t, err)
	dir := t.TempDir()
	env := []string{"BRIDGE_SOURCE=postgres-wal", "BRIDGE_DATABASE_URL=" + url, "BRIDGE_DATABASE_TABLE=" + table,
		"BRIDGE_NATS_LISTEN=127.0.0.1:" + strconv.Itoa(freePort(t)), "BRIDGE_HTTP_LISTEN=127.0.0.1:0"}
	for _, cmd := range []string{"migrate", "run"} {
		r := runBridge(t, dir, env, cmd)
		require.Equal(t, 2, r.code, "bridge %s: %s", cmd, r)
		require.Contains(t, r.stderr, `wal_level is "`+level+`"`, "bridge %s names the setting and its value", cmd)
		require.Contains(t, r.stderr, "ALTER SYSTEM SET wal_level = logical", "bridge %s says how to change it", cmd)
	}
}

// TestWALOperatorCommands: status shows the slot; slot drop refuses while
// a relay streams from it. When the slot is lost under a running relay
// (dropped, as after a failover to a server without it) the relay keeps
// running and waits, /readyz naming the missing slot; once migrate creates
// it again, the relay goes on by itself, and the rows committed meanwhile
// are published by the sweep. After the relay stopped, slot drop drops it.
func TestWALOperatorCommands(t *testing.T) {
	t.Parallel()
	e := newWALEnv(t)
	e.insert(t, 0, 10)
	p := e.run(t, "BRIDGE_WAL_SWEEP_INTERVAL=200ms", "BRIDGE_LOG_LEVEL=info")
	addr := relayHTTPAddr(t, p)
	e.waitDone(t, 10, 30*time.Second, p)

	r := runBridge(t, e.dir, e.env(), "status", "--json")
	require.Zero(t, r.code, "%s", r)
	var doc struct {
		Slot struct {
			Name          string   `json:"name"`
			Active        bool     `json:"active"`
			WALStatus     string   `json:"wal_status"`
			RetainedBytes int64    `json:"retained_bytes"`
			LagSeconds    *float64 `json:"lag_seconds"`
		} `json:"replication_slot"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), r.stdout)
	require.Equal(t, e.slot, doc.Slot.Name)
	require.True(t, doc.Slot.Active)
	require.NotEmpty(t, doc.Slot.WALStatus)
	require.Positive(t, doc.Slot.RetainedBytes)
	require.Nil(t, doc.Slot.LagSeconds, "no pending row")
	r = runBridge(t, e.dir, e.env(), "status")
	require.Contains(t, r.stdout, "replication slot "+e.slot+": active")
	require.Contains(t, r.stdout, "retained WAL:")

	r = runBridge(t, e.dir, e.env(), "slot", "drop")
	require.Equal(t, 1, r.code, "%s", r)
	require.Contains(t, r.stderr, "stop the relay")

	// The slot is lost under the running relay.
	poll(t, 30*time.Second, func() bool {
		_, _ = e.db.Exec(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active`, e.slot)
		_, _ = e.db.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, e.slot)
		var n int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&n))
		return n == 0
	}, "the slot could not be dropped")
	e.insert(t, 10, 20) // no slot: nothing reads these yet
	poll(t, 30*time.Second, func() bool {
		code, body := httpGet("http://" + addr + "/readyz")
		return code == 503 && strings.Contains(body, "does not exist")
	}, "/readyz does not say the slot is missing")
	require.False(t, p.exited(), "the relay waits for its slot")

	r = runBridge(t, e.dir, e.env(), "migrate")
	require.Zero(t, r.code, "%s", r)
	e.insert(t, 20, 30)
	e.waitDone(t, 30, 30*time.Second, p)
	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	require.Len(t, msgs, 30, "each row once")
	var got []string
	for _, m := range msgs {
		got = append(got, strings.TrimPrefix(m.Headers().Get(jetstream.MsgIDHeader), "k-"))
	}
	t.Logf("stream order after the slot was created again: %s", strings.Join(got, " "))
	code, body := httpGet("http://" + addr + "/readyz")
	require.Equal(t, 200, code, body)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t, 30*time.Second), "clean stop\n%s", p.stderr)
	// The slot is the relay's, whatever tables it relays: slot drop takes
	// the tables of a relay over several (database.tables, as its
	// environment would set them) and drops the one slot.
	env := slices.DeleteFunc(e.env(), func(v string) bool { return strings.HasPrefix(v, "BRIDGE_DATABASE_TABLE=") })
	r = runBridge(t, e.dir, append(env, "BRIDGE_DATABASE_TABLES="+e.table+",tenant_*.outbox"), "slot", "drop")
	require.Zero(t, r.code, "%s", r)
	require.Contains(t, r.stdout, "dropped replication slot "+e.slot)
}

// TestWALStandbyTakesOver: a second relay on the same slot waits as a
// standby (ready, logging it once); when the first is killed it takes the
// slot over and relays the rest, each row once, in commit order.
func TestWALStandbyTakesOver(t *testing.T) {
	t.Parallel()
	e := newWALEnv(t)
	a := e.run(t)
	e.insert(t, 0, 100)
	e.waitDone(t, 100, 30*time.Second, a)

	b := e.run(t, "BRIDGE_LOG_LEVEL=info")
	addr := relayHTTPAddr(t, b)
	poll(t, 30*time.Second, func() bool {
		return strings.Contains(b.stderr.String(), "replication slot in use by another process")
	}, "the second relay never said it waits for the slot")
	code, body := httpGet("http://" + addr + "/readyz")
	require.Equal(t, 200, code, "a standby is ready: %s", body)

	kill(t, a)
	for i := 100; i < 1000; i += 100 {
		e.insert(t, i, i+100)
	}
	e.waitDone(t, 1000, 60*time.Second, b)
	e.verifyCommitOrder(t, 1000)
	require.Equal(t, 1, strings.Count(b.stderr.String(), "replication slot in use by another process"), "logged once")
}
