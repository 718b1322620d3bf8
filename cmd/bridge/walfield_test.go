package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// Tests of source: postgres-wal against failures users of logical
// replication tools met in the field (issue 23).

// TestWALNoDuplicateAfterLateRestart: ten rounds of a relay SIGKILLed
// while a producer commits rows, each followed by a pause longer than the
// stream's duplicate window (5 s) before the next relay starts. A new
// relay reads again from the slot's confirmed position, which lags what
// the killed one published and marked; JetStream's duplicate window no
// longer drops the repeats. Every row is in the stream exactly once, in
// commit order, and done: the rows marked done are settled without a
// publish, the ones published and not yet marked are found in the stream.
func TestWALNoDuplicateAfterLateRestart(t *testing.T) {
	t.Parallel()
	const window = 5 * time.Second
	e := newWALEnvWindow(t, window)
	const rounds, perRound = 10, 1500
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 23))
	small := []string{"BRIDGE_RELAY_MAX_IN_FLIGHT=300", "BRIDGE_WAL_SWEEP_INTERVAL=1h"}
	for i := range rounds {
		p := e.run(t, small...)
		produced := make(chan struct{})
		go func() {
			defer close(produced)
			for n := i * perRound; n < (i+1)*perRound; n += 50 {
				e.insert(t, n, n+50)
				time.Sleep(3 * time.Millisecond) // paced: the kills land among the commits
			}
		}()
		target := min(e.count(t, "done")+200+rng.IntN(perRound), (i+1)*perRound)
		poll(t, 60*time.Second, func() bool {
			if p.exited() {
				t.Fatalf("relay %d exited (%d)\nstderr:\n%s", i, p.code, p.stderr)
			}
			return e.count(t, "done") >= target
		})
		kill(t, p)
		<-produced
		time.Sleep(window + time.Second) // every id the killed relay published leaves the window
	}
	total := rounds * perRound
	final := e.run(t, "BRIDGE_WAL_SWEEP_INTERVAL=1h")
	e.waitDone(t, total, 120*time.Second, final)
	e.verifyCommitOrder(t, total)
}

// TestWALStatusWithinSenderTimeout: with wal_sender_timeout 3 s on the
// relay's replication connection, NATS away for 30 s while rows keep
// coming (the pipeline holds its queue, the reader waits for room in the
// budget and reads nothing), the server never ends the walsender: the
// relay sends standby status at least every wal_sender_timeout / 3. Every
// row is then in the stream once, in commit order.
func TestWALStatusWithinSenderTimeout(t *testing.T) {
	t.Parallel()
	e := newWALEnv(t)
	p := e.run(t, "BRIDGE_RELAY_MAX_IN_FLIGHT=200", "BRIDGE_WAL_SWEEP_INTERVAL=1h",
		"BRIDGE_WAL_REPLICATION_URL="+e.dbURL+"&options=-c%20wal_sender_timeout%3D3s")
	e.insert(t, 0, 500)
	e.waitDone(t, 500, 60*time.Second, p)
	e.nats.Stop()
	for n := 500; n < 3500; n += 100 {
		e.insert(t, n, n+100)
	}
	time.Sleep(30 * time.Second) // an outage of its own length: what is measured is time
	require.NotContains(t, p.stderr.String(), "replication stream interrupted", "the walsender ended during the NATS outage")
	e.nats.Restart(t)
	e.waitDone(t, 3500, 90*time.Second, p)
	require.NotContains(t, p.stderr.String(), "replication stream interrupted")
	e.verifyCommitOrder(t, 3500)
}

// TestWALFrozenNATSFailsLivenessOnTime: NATS stops answering with its
// connection open (a proxy that stops forwarding) while rows wait. The
// rows do not move, so the relay is stalled after relay.stall_after and
// /healthz fails after relay.stall_unhealthy_after — whatever happens to
// the connection meanwhile: publishes past their ack deadline, holds and
// retries, the connection given up (pings unanswered) and connected
// again. It stays failed until NATS answers again, then every row is
// in the stream once, in commit order.
func TestWALFrozenNATSFailsLivenessOnTime(t *testing.T) {
	t.Parallel()
	e := newWALEnv(t)
	proxy := bridgetest.StartProxy(t, e.nats.Server.Addr().String())
	p := e.run(t, "BRIDGE_NATS_URL=nats://"+proxy.Addr(), "BRIDGE_LOG_LEVEL=info",
		"BRIDGE_RELAY_STALL_AFTER=3s", "BRIDGE_RELAY_STALL_UNHEALTHY_AFTER=5s", "BRIDGE_DEDUP_GUARD=off",
		// Each try ends at the 2 s ack deadline and waits at most 200 ms:
		// retries come sooner than stall_after, and are not rows moving.
		"BRIDGE_RELAY_BACKOFF_MAX=200ms", "BRIDGE_RELAY_MAX_ATTEMPTS=1000")
	base := "http://" + relayHTTPAddr(t, p)
	e.insert(t, 0, 10)
	e.waitDone(t, 10, 30*time.Second, p)
	proxy.Freeze()
	frozen := time.Now()
	e.insert(t, 10, 20)
	poll(t, 30*time.Second, func() bool {
		code, body := httpGet(base + "/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "stalled")
	}, "/healthz never failed while NATS was frozen and rows waited")
	took := time.Since(frozen)
	require.Less(t, took, 20*time.Second, "stall_after 3 s + stall_unhealthy_after 5 s, checked every 750 ms")
	// Past the client giving the connection up (PING every 20 s, 2
	// unanswered: nats.PingInterval in internal/broker/connect.go) and
	// connecting again to the frozen server: still failed. (Before, the
	// stall ended then, 52 s into the freeze.)
	for time.Since(frozen) < 75*time.Second {
		code, body := httpGet(base + "/healthz")
		require.Equal(t, http.StatusServiceUnavailable, code, "/healthz recovered %s into the freeze: %s", time.Since(frozen).Round(time.Second), body)
		time.Sleep(time.Second) // sampled: /healthz must stay failed all along the freeze
	}
	proxy.Thaw()
	e.waitDone(t, 20, 90*time.Second, p)
	poll(t, 60*time.Second, func() bool {
		code, _ := httpGet(base + "/healthz")
		return code == http.StatusOK
	}, "/healthz never recovered once rows flowed again")
	e.verifyCommitOrder(t, 20)
}

// TestWALRowsDeletedByProducer: the insert-then-delete mode
// (wal.rows_deleted_by_producer). The producer deletes every outbox row in
// the transaction that inserts it, so the table stays empty and only the
// write-ahead log carries the events: 10,000 rows in 100 transactions, the
// relay SIGKILLed partway and restarted after the stream's duplicate
// window (5 s). Every row is in the stream once, in commit order, and the
// table is empty at the end. Without the mode the check of rows read again
// takes a row missing from the table for one relayed or deleted by hand
// and drops it; without the check the restart publishes them again.
func TestWALRowsDeletedByProducer(t *testing.T) {
	t.Parallel()
	const window = 5 * time.Second
	e := newWALEnvWindow(t, window)
	const total, perTx = 10000, 100
	mode := []string{"BRIDGE_WAL_ROWS_DELETED_BY_PRODUCER=true", "BRIDGE_RELAY_MAX_IN_FLIGHT=300", "BRIDGE_WAL_SWEEP_INTERVAL=1h"}
	p := e.run(t, mode...)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for n := 0; n < total; n += perTx {
			e.insertDeleted(t, n, n+perTx)
			time.Sleep(5 * time.Millisecond) // paced: the kills land among the commits
		}
	}()
	poll(t, 60*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited (%d)\nstderr:\n%s", p.code, p.stderr)
		return e.inStream(t) >= 3000
	})
	kill(t, p)
	<-produced
	time.Sleep(window + time.Second) // every id the killed relay published leaves the window
	final := e.run(t, mode...)
	poll(t, 120*time.Second, func() bool {
		require.False(t, final.exited(), "relay exited (%d)\nstderr:\n%s", final.code, final.stderr)
		return e.inStream(t) >= total
	})
	e.verifyDeletedOnce(t, total)
}

// TestWALInsertThenDeleteMode: wal.rows_deleted_by_producer, the producer
// deletes each row in the transaction that inserts it (the table stays
// empty, the log carries the event). 10,000 rows in 20 transactions; the
// relay is SIGKILLed halfway and started again after the stream's 5 s
// duplicate window: the rows it reads again are not in the table, so
// they are looked up in the stream instead of published twice. The table
// is empty at the end and every row is in the stream once, in commit
// order.
func TestWALInsertThenDeleteMode(t *testing.T) {
	t.Parallel()
	const window = 5 * time.Second
	e := newWALEnvWindow(t, window)
	mode := []string{"BRIDGE_WAL_ROWS_DELETED_BY_PRODUCER=true", "BRIDGE_WAL_SWEEP_INTERVAL=1h", "BRIDGE_RELAY_MAX_IN_FLIGHT=300"}
	const total, perTx = 10000, 500
	produce := func(from, to int) {
		for n := from; n < to; n += perTx {
			e.insertDeleted(t, n, n+perTx)
		}
	}
	p := e.run(t, mode...)
	produce(0, total/2)
	poll(t, 60*time.Second, func() bool { return e.inStream(t) >= total/4 }, "nothing relayed")
	kill(t, p)
	time.Sleep(window + time.Second)
	p = e.run(t, mode...)
	produce(total/2, total)
	poll(t, 120*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited (%d)\nstderr:\n%s", p.code, p.stderr)
		return e.inStream(t) >= total
	}, "not every row reached the stream")
	e.verifyDeletedOnce(t, total)
}

// TestWALPublicationFaultsNamedAndHealed: while rows keep being committed,
// the table is dropped from the publication (the server ends no session:
// it just stops sending the table's inserts), and then the publication is
// dropped (the server refuses the slot's changes after the drop even once
// the publication exists again), and a column list and a row filter are
// set on it (the rows it leaves out reach the relay only through the
// sweep, or not whole). Each is on /readyz within 10 s with the
// command that heals it, and that command, `bridge migrate`, heals it;
// every row is in the stream once. (Rows committed during a fault reach
// the relay through the sweep: not in commit order.)
func TestWALPublicationFaultsNamedAndHealed(t *testing.T) {
	t.Parallel()
	e := newWALEnv(t)
	p := e.run(t, "BRIDGE_WAL_SWEEP_INTERVAL=2s", "BRIDGE_LOG_LEVEL=info")
	base := "http://" + relayHTTPAddr(t, p)
	e.insert(t, 0, 100)
	e.waitDone(t, 100, 60*time.Second, p)
	total := 100
	for _, fault := range []struct{ name, sql, then, readyz string }{
		{"table dropped from the publication", "ALTER PUBLICATION " + e.publication + " DROP TABLE " + e.table, "", "does not publish the inserts of " + e.table},
		{"publication dropped", "DROP PUBLICATION " + e.publication, "", "publication " + e.publication + " does not exist"},
		// Rows committed between the drop and the create: the server
		// decodes them without the publication, and refuses the slot
		// though the publication exists again.
		{"publication dropped and created again by hand", "DROP PUBLICATION " + e.publication,
			"CREATE PUBLICATION " + e.publication + " FOR TABLE " + e.table + " WITH (publish = 'insert')", "publication " + e.publication + " does not exist"},
		// PostgreSQL 15: a column list and a row filter.
		{"a column list", "ALTER PUBLICATION " + e.publication + " SET TABLE " + e.table + " (id, idempotency_key, subject)", "",
			"publishes " + e.table + " with a column list without"},
		{"a row filter", "ALTER PUBLICATION " + e.publication + " SET TABLE " + e.table + " WHERE (subject <> 'events.crash')", "",
			"publishes " + e.table + " with a row filter WHERE"},
	} {
		t.Log(fault.name)
		// Rows keep coming, through the fault and its repair.
		stop, produced := make(chan struct{}), make(chan int, 1)
		var once sync.Once
		halt := func() { once.Do(func() { close(stop) }) }
		exited := make(chan struct{})
		t.Cleanup(func() { halt(); <-exited }) // a failed check ends the producer too
		go func(n int) {
			defer close(exited)
			for {
				select {
				case <-stop:
					produced <- n
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := e.db.Exec(e.insertSQL(), n, n+10); err != nil {
					t.Errorf("insert: %v", err)
				}
				n += 10
			}
		}(total)
		time.Sleep(300 * time.Millisecond) // the fault comes while rows are being written
		_, err := e.db.Exec(fault.sql)
		require.NoError(t, err)
		at := time.Now()
		if fault.then != "" {
			time.Sleep(time.Second) // the second half of the fault comes a while after the first
			_, err := e.db.Exec(fault.then)
			require.NoError(t, err)
		}
		poll(t, 15*time.Second, func() bool {
			code, body := httpGet(base + "/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, fault.readyz) && strings.Contains(body, "bridge migrate")
		}, "%s: /readyz never named it", fault.name)
		// /readyz asks the server when it is asked; the log line comes from
		// the relay's own check (every 5 s): each within 10 s of the fault.
		poll(t, 10*time.Second, func() bool { return strings.Contains(p.stderr.String(), fault.readyz) }, "%s: never logged", fault.name)
		require.Less(t, time.Since(at), 10*time.Second, "%s: named on /readyz and logged within 10 s", fault.name)
		for range 8 { // the fault lasts until it is repaired, and /readyz says so all along
			code, body := httpGet(base + "/readyz")
			require.Equal(t, http.StatusServiceUnavailable, code, "%s: /readyz before the repair: %s", fault.name, body)
			time.Sleep(time.Second) // sampled: the fault must be named all along
		}
		// The producer stops before the repair: an idle outbox does not
		// keep /readyz failing once it is repaired.
		halt()
		total = <-produced
		r := runBridge(t, e.dir, e.env(), "migrate")
		require.Zero(t, r.code, "%s: bridge migrate\n%s", fault.name, r)
		t.Logf("%s: bridge migrate:\n%s", fault.name, r.stdout)
		poll(t, 30*time.Second, func() bool {
			code, _ := httpGet(base + "/readyz")
			return code == http.StatusOK
		}, "%s: /readyz not 200 after bridge migrate\n%s", fault.name, r)
		e.insert(t, total, total+10) // and rows committed after the repair
		total += 10
	}
	e.waitDone(t, total, 90*time.Second, p)
	require.Equal(t, total, e.count(t, ""))
	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	seen := map[string]bool{}
	for _, m := range msgs {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		require.False(t, seen[id], "%s twice in the stream", id)
		seen[id] = true
	}
	require.Len(t, seen, total, "every row once in the stream")
}

// insertDeleted commits rows [from, to) and deletes them in the same
// transaction: the insert-then-delete pattern (wal.rows_deleted_by_producer).
func (e *walEnv) insertDeleted(t *testing.T, from, to int) {
	t.Helper()
	tx, err := e.db.Begin()
	require.NoError(t, err)
	_, err = tx.Exec(e.insertSQL(), from, to)
	require.NoError(t, err)
	_, err = tx.Exec(`DELETE FROM ` + e.table)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
}

// inStream is how many messages the stream EVENTS holds.
func (e *walEnv) inStream(t *testing.T) int {
	t.Helper()
	s, err := e.js.Stream(t.Context(), "EVENTS")
	require.NoError(t, err)
	return int(s.CachedInfo().State.Msgs)
}

// verifyDeletedOnce checks, after a pause in which a duplicate would land,
// that the table is empty and EVENTS holds rows [0, total) once each, in
// commit order.
func (e *walEnv) verifyDeletedOnce(t *testing.T, total int) {
	t.Helper()
	time.Sleep(2 * time.Second) // a duplicate would land now
	require.Zero(t, e.count(t, ""), "the table stays empty")
	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	require.Len(t, msgs, total, "the stream holds exactly one message per row")
	for i, m := range msgs {
		require.Equal(t, "k-"+strconv.Itoa(i), m.Headers().Get(jetstream.MsgIDHeader), "stream position %d", i)
	}
}

// TestWALMarksThatWaitAreNamed: while the write of marks waits for the
// database (here rows locked FOR SHARE by another session, as a long
// transaction of a report or a migration holds them), the slot's confirmed
// position waits with it. Once the write has waited longer than 5 s,
// /readyz answers 503 naming the marks, and bridge_wal_mark_wait_seconds
// says how long; nothing told of it before (the write has no deadline). Both
// clear once the lock goes, and every row is marked and in the stream once.
func TestWALMarksThatWaitAreNamed(t *testing.T) {
	t.Parallel()
	e := newWALEnv(t)
	p := e.run(t, "BRIDGE_LOG_LEVEL=info") // relayHTTPAddr reads the address from the log
	base := "http://" + relayHTTPAddr(t, p)
	e.insert(t, 0, 1)
	poll(t, 30*time.Second, func() bool { return e.count(t, "done") == 1 }, "the first row was not relayed")

	// The relay is stopped while the next rows are committed and locked,
	// so that their marks are the ones that wait.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
	const total = 20
	e.insert(t, 1, total)
	lock, err := e.db.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Rollback() })
	_, err = lock.Exec(`SELECT id FROM ` + e.table + ` WHERE status = 'pending' FOR SHARE`)
	require.NoError(t, err)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))

	poll(t, 30*time.Second, func() bool { return e.inStream(t) == total }, "the rows were not published")
	poll(t, 30*time.Second, func() bool {
		code, body := httpGet(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "marks: a statement has waited")
	}, "/readyz never said that the marks wait")
	v, _ := metric(metricsText(t, base), "bridge_wal_mark_wait_seconds")
	require.Greater(t, v, 5.0, "bridge_wal_mark_wait_seconds")
	require.Equal(t, 1, e.count(t, "done"), "marks written through the lock")

	require.NoError(t, lock.Rollback())
	poll(t, 30*time.Second, func() bool { return e.count(t, "done") == total }, "the rows were not marked once the lock went")
	poll(t, 30*time.Second, func() bool { code, _ := httpGet(base + "/readyz"); return code == http.StatusOK }, "/readyz still fails once the marks were written")
	v, _ = metric(metricsText(t, base), "bridge_wal_mark_wait_seconds")
	require.Zero(t, v)
	e.verifyCommitOrder(t, total)
}
