package main

import (
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

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
				time.Sleep(3 * time.Millisecond)
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
	time.Sleep(30 * time.Second)
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
		time.Sleep(time.Second)
	}
	proxy.Thaw()
	e.waitDone(t, 20, 90*time.Second, p)
	poll(t, 60*time.Second, func() bool {
		code, _ := httpGet(base + "/healthz")
		return code == http.StatusOK
	}, "/healthz never recovered once rows flowed again")
	e.verifyCommitOrder(t, 20)
}
