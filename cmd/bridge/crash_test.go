package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Crash and fault tests: the real binary relays a PostgreSQL outbox to a
// real nats-server while the test kills it, freezes it, stops the server or
// cuts its database sessions. Afterwards every row must be done and the
// stream must hold exactly one message per row.

// crashEnv is one outbox table and the NATS the relays publish to.
type crashEnv struct {
	dbURL, table string
	db           *sql.DB
	natsURL      string
	js           jetstream.JetStream
	dir          string
}

func newCrashEnv(t *testing.T, natsURL string, replicas int) *crashEnv {
	t.Helper()
	dbURL, table := bridgetest.PostgresTable(t)
	return newCrashEnvOn(t, dbURL, table, natsURL, replicas)
}

// newCrashEnvOn is newCrashEnv on a given PostgreSQL table.
func newCrashEnvOn(t *testing.T, dbURL, table, natsURL string, replicas int) *crashEnv {
	t.Helper()
	ctx := context.Background()
	db, err := outbox.Open(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = outbox.Migrate(ctx, db, table)
	require.NoError(t, err)

	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: 2 * time.Minute, Replicas: replicas,
	})
	require.NoError(t, err)
	return &crashEnv{dbURL: dbURL, table: table, db: db.SQL, natsURL: natsURL, js: js, dir: t.TempDir()}
}

// insert commits rows [from, to): key k-<n>, and every tenth row an
// ordering key among 50.
func (e *crashEnv) insert(t *testing.T, from, to int) {
	t.Helper()
	_, err := e.db.Exec(e.insertSQL(), from, to)
	require.NoError(t, err)
}

// insertSQL inserts rows [$1, $2).
func (e *crashEnv) insertSQL() string {
	return `INSERT INTO ` + e.table + ` (idempotency_key, subject, payload, headers, ordering_key)
		SELECT 'k-' || n, 'events.crash', convert_to('row ' || n, 'UTF8'), ('{"X-N": "' || n || '"}')::jsonb,
		       CASE WHEN n % 10 = 0 THEN 'ok-' || (n % 50) END
		FROM generate_series($1::int, $2::int - 1) AS n`
}

// relay starts `bridge run` against the environment with short leases.
func (e *crashEnv) relay(t *testing.T, owner string, extraEnv ...string) *process {
	t.Helper()
	env := append([]string{
		"BRIDGE_DATABASE_URL=" + e.dbURL,
		"BRIDGE_DATABASE_TABLE=" + e.table,
		"BRIDGE_NATS_URL=" + e.natsURL,
		"BRIDGE_HTTP_LISTEN=127.0.0.1:0",
		"BRIDGE_RELAY_OWNER=" + owner,
		"BRIDGE_RELAY_INFLIGHT_TIMEOUT=3s",
		"BRIDGE_RELAY_ACK_DEADLINE=2s",
		"BRIDGE_RELAY_PUBLISH_TIMEOUT=1s",
		"BRIDGE_RELAY_BACKOFF_INITIAL=100ms",
		"BRIDGE_RELAY_BACKOFF_MAX=1s",
		"BRIDGE_RELAY_POLL_INTERVAL=50ms",
		"BRIDGE_SHUTDOWN_TIMEOUT=5s",
		"BRIDGE_LOG_LEVEL=warn",
	}, extraEnv...)
	return start(t, e.dir, env, "run")
}

// count returns the number of rows in status, or all rows when status is "".
func (e *crashEnv) count(t *testing.T, status string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM `+e.table+` WHERE $1 = '' OR status = $1`, status).Scan(&n))
	return n
}

// waitDone waits until at least n rows are done; the relays must keep running.
func (e *crashEnv) waitDone(t *testing.T, n int, d time.Duration, relays ...*process) {
	t.Helper()
	poll(t, d, func() bool {
		for _, r := range relays {
			require.False(t, r.exited(), "a relay exited (%d)\nstderr:\n%s", r.code, r.stderr)
		}
		return e.count(t, "done") >= n
	}, "fewer than %d rows done", n)
}

// verify checks that rows [0, total) are all done and that the stream holds
// exactly one message for each, in id order per ordering key.
func (e *crashEnv) verify(t *testing.T, total int) {
	t.Helper()
	require.Equal(t, total, e.count(t, ""))
	require.Equal(t, total, e.count(t, "done"), "every row ends done")
	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	require.Len(t, msgs, total, "the stream holds exactly one message per row")
	seen := make(map[string]bool, total)
	lastPerKey := map[int]int{}
	for _, m := range msgs {
		key := m.Headers().Get(jetstream.MsgIDHeader)
		require.False(t, seen[key], "message %s twice", key)
		seen[key] = true
		n, err := strconv.Atoi(strings.TrimPrefix(key, "k-"))
		require.NoError(t, err)
		require.Equal(t, "row "+strconv.Itoa(n), string(m.Data()))
		if n%10 == 0 {
			k := n % 50
			if last, ok := lastPerKey[k]; ok {
				require.Greater(t, n, last, "ordering key ok-%d out of order", k)
			}
			lastPerKey[k] = n
		}
	}
	for n := range total {
		require.True(t, seen["k-"+strconv.Itoa(n)], "row k-%d missing from the stream", n)
	}
}

func kill(t *testing.T, p *process) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	p.wait(t, 10*time.Second)
}

func TestCrashSIGKILLAtRandomMoments(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	e := newCrashEnv(t, n.URL(), 1)
	const total = 20000
	e.insert(t, 0, total)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	small := []string{"BRIDGE_RELAY_BATCH_SIZE=100", "BRIDGE_RELAY_MAX_IN_FLIGHT=300"}
	for i := range 20 {
		p := e.relay(t, fmt.Sprintf("relay-%d", i), small...)
		target := min(e.count(t, "done")+50+rng.IntN(600), total)
		e.waitDone(t, target, 60*time.Second, p)
		kill(t, p)
	}
	t.Logf("after 20 kills: %d of %d rows done, %d in flight", e.count(t, "done"), total, e.count(t, "in_flight"))
	final := e.relay(t, "relay-final")
	e.waitDone(t, total, 120*time.Second, final)
	e.verify(t, total)
}

func TestCrashNATSStoppedAndRestarted(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	e := newCrashEnv(t, n.URL(), 1)
	e.insert(t, 0, 8000)
	p := e.relay(t, "relay-1", "BRIDGE_RELAY_BATCH_SIZE=100", "BRIDGE_RELAY_MAX_IN_FLIGHT=300")
	e.waitDone(t, 1000, 60*time.Second, p)

	n.Stop()
	outage := time.NewTimer(10 * time.Second)
	e.insert(t, 8000, 10000) // committed during the outage
	<-outage.C
	inOutage := e.count(t, "done")
	n.Restart(t)

	e.waitDone(t, 10000, 120*time.Second, p)
	require.Less(t, inOutage, 10000)
	e.verify(t, 10000)
}

func TestCrashStreamLeaderShutDown(t *testing.T) {
	t.Parallel()
	c := bridgetest.StartCluster(t)
	e := newCrashEnv(t, c.URLs(), 3)
	const total = 10000
	e.insert(t, 0, total)
	p := e.relay(t, "relay-1", "BRIDGE_RELAY_BATCH_SIZE=100", "BRIDGE_RELAY_MAX_IN_FLIGHT=300")
	e.waitDone(t, 2000, 60*time.Second, p)

	info, err := e.js.Stream(context.Background(), "EVENTS")
	require.NoError(t, err)
	leader := info.CachedInfo().Cluster.Leader
	require.NotEmpty(t, leader)
	srv := c.Server(leader)
	require.NotNil(t, srv, "leader %s", leader)
	srv.Shutdown()
	t.Logf("stream leader %s shut down at %d rows done", leader, e.count(t, "done"))

	e.waitDone(t, total, 120*time.Second, p)
	e.verify(t, total)
}

func TestCrashPostgresSessionsTerminated(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	e := newCrashEnv(t, n.URL(), 1)
	const total = 10000
	e.insert(t, 0, total)
	app := "bridge-crash-" + strconv.Itoa(rand.IntN(1<<30))
	sep := "?"
	if strings.Contains(e.dbURL, "?") {
		sep = "&"
	}
	p := e.relay(t, "relay-1", "BRIDGE_DATABASE_URL="+e.dbURL+sep+"application_name="+app,
		"BRIDGE_RELAY_BATCH_SIZE=100", "BRIDGE_RELAY_MAX_IN_FLIGHT=300")
	terminated := 0
	for step := 1; step <= 5; step++ {
		e.waitDone(t, step*1500, 60*time.Second, p)
		var killed int
		require.NoError(t, e.db.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed))
		terminated += killed
	}
	require.Positive(t, terminated, "the relay's sessions were found and terminated")
	e.waitDone(t, total, 120*time.Second, p)
	e.verify(t, total)
}

func TestCrashFrozenRelayMarksNothingItLost(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	e := newCrashEnv(t, n.URL(), 1)
	const total = 10000
	e.insert(t, 0, total)
	httpA := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	a := e.relay(t, "relay-a", "BRIDGE_HTTP_LISTEN="+httpA, "BRIDGE_RELAY_BATCH_SIZE=200", "BRIDGE_RELAY_MAX_IN_FLIGHT=400")
	ownedByA := func() int {
		var k int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM `+e.table+` WHERE status = 'in_flight' AND owner = 'relay-a'`).Scan(&k))
		return k
	}
	// Statements of relay-a that reach the database before the freeze still
	// finish: a mark among them settles its rows. Freeze it again until it
	// holds leases once its sessions are idle, i.e. leases only relay-a's
	// own pipeline could settle.
	busyA := func() int {
		var k int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bridge relay-a' AND state <> 'idle'`).Scan(&k))
		return k
	}
	fencedA := func() float64 {
		client := &http.Client{Timeout: 2 * time.Second}
		resp, err := client.Get("http://" + httpA + "/metrics")
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		return metricValue(readAll(resp), "bridge_marks_fenced_total")
	}
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })

	// A round: freeze relay-a holding leases, let relay-b requeue them once
	// their 3 s lease is over and relay everything, wake relay-a, and wait
	// for its marks to be fenced. A freeze that falls after a claim
	// committed and before relay-a read its result leaves relay-a nothing to
	// mark: that claim fails its statement deadline on waking (the rows were
	// never published by relay-a, so there is nothing to fence), and the
	// round is run again with new rows.
	var b *process
	rows := total
	for round := 1; ; round++ {
		var frozenWith int
		for try := 0; try < 20 && frozenWith == 0; try++ {
			poll(t, 60*time.Second, func() bool { return e.count(t, "done") > 0 && ownedByA() > 0 }, "relay-a never held a lease")
			require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP))
			poll(t, 10*time.Second, func() bool { return busyA() == 0 }, "relay-a's statements did not finish")
			if frozenWith = ownedByA(); frozenWith == 0 {
				require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
			}
		}
		require.Positive(t, frozenWith, "relay-a never froze holding a lease")
		logged := len(a.stderr.String())

		if b == nil {
			b = e.relay(t, "relay-b")
		}
		e.waitDone(t, rows, 120*time.Second, b)
		require.Zero(t, ownedByA())

		require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
		deadline := time.Now().Add(30 * time.Second)
		for fencedA() == 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // polls the metrics of another process
		}
		if fencedA() > 0 {
			t.Logf("round %d: relay-a was frozen holding %d rows; its marks after SIGCONT were fenced", round, frozenWith)
			break
		}
		woke := a.stderr.String()[logged:]
		require.Contains(t, woke, "claim outbox rows", "relay-a never reported a fenced mark after SIGCONT, and no claim of its failed on waking")
		require.Less(t, round, 3, "relay-a was frozen between a claim and its result in every round")
		t.Logf("round %d: relay-a was frozen between a claim and its result; again with new rows", round)
		e.insert(t, rows, rows+total)
		rows += total
	}
	e.verify(t, rows)
	require.False(t, a.exited(), "relay-a keeps running after its lease was taken over")
}

func readAll(resp *http.Response) string {
	var b strings.Builder
	buf := make([]byte, 32*1024)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// metricValue reads an unlabelled metric from Prometheus text.
func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
