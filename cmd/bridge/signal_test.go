package main

// Signals sent to a busy relay: SIGTERM drains and exits 0 within
// shutdown_timeout leaving no lease behind; a second signal while draining
// exits 1 at once. Either way a later relay finishes and the stream holds
// exactly one message per row.

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// inflightOwnedBy counts the rows in flight under owner's lease.
func (e *crashEnv) inflightOwnedBy(t *testing.T, owner string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM `+e.table+` WHERE status = 'in_flight' AND owner = $1`, owner).Scan(&n))
	return n
}

func TestSIGTERMDuringBusyRelay(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	e := newCrashEnv(t, n.URL(), 1)
	const total = 20000
	e.insert(t, 0, total)

	const shutdownTimeout = 5 * time.Second
	p := e.relay(t, "relay-term", "BRIDGE_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(), "BRIDGE_LOG_LEVEL=info")
	// Busy: a few thousand rows done, and leases held right now.
	poll(t, 60*time.Second, func() bool {
		require.False(t, p.exited(), "the relay exited (%d)\nstderr:\n%s", p.code, p.stderr)
		return e.count(t, "done") >= 3000 && e.inflightOwnedBy(t, "relay-term") > 0
	}, "the relay never held leases after 3000 rows were done")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	signalled := time.Now()
	require.Equal(t, 0, p.wait(t, shutdownTimeout), "bridge run after SIGTERM\nstderr:\n%s", p.stderr)
	t.Logf("stopped %s after SIGTERM with %d of %d rows done", time.Since(signalled).Round(time.Millisecond), e.count(t, "done"), total)
	require.Zero(t, e.inflightOwnedBy(t, "relay-term"), "rows left in flight under the stopped relay's lease")
	require.Less(t, e.count(t, "done"), total, "the relay was stopped before it finished")
	require.NotContains(t, p.stderr.String(), `"level":"ERROR"`)
	require.Contains(t, p.stderr.String(), `"msg":"relay stopped"`)

	next := e.relay(t, "relay-next")
	e.waitDone(t, total, 120*time.Second, next)
	e.verify(t, total)
}

// TestSIGTERMSecondSignalDuringDrain freezes the relay's NATS connection
// (a TCP proxy that stops forwarding, so the client sees no disconnect and
// its publishes wait for PubAcks until publish_timeout), sends SIGTERM, and
// while the relay drains sends SIGINT: the relay exits 1 at once.
//
// Stopping the NATS server would not make a slow drain: on the disconnect
// nats.go fails every pending PubAck at once (ErrDisconnected), the relay
// releases those rows and the drain ends quickly.
func TestSIGTERMSecondSignalDuringDrain(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	proxy := bridgetest.StartProxy(t, n.Server.Addr().String())
	e := newCrashEnv(t, n.URL(), 1)
	const total, first = 5000, 1000
	e.insert(t, 0, first)

	p := e.relay(t, "relay-hung",
		"BRIDGE_NATS_URL=nats://"+proxy.Addr(),
		"BRIDGE_HTTP_LISTEN=127.0.0.1:0",
		"BRIDGE_RELAY_BATCH_SIZE=100", "BRIDGE_RELAY_MAX_IN_FLIGHT=300",
		"BRIDGE_RELAY_PUBLISH_TIMEOUT=30s", "BRIDGE_RELAY_ACK_DEADLINE=40s", "BRIDGE_RELAY_INFLIGHT_TIMEOUT=50s",
		"BRIDGE_SHUTDOWN_TIMEOUT=60s", "BRIDGE_LOG_LEVEL=info")
	base := "http://" + relayHTTPAddr(t, p)
	e.waitDone(t, 500, 60*time.Second, p)

	proxy.Freeze()
	// Rows written now are claimed and published into the frozen
	// connection, where they wait for their PubAck. (Inserted after the
	// freeze: a fast relay had relayed every row written before it, and
	// had none in flight.)
	e.insert(t, first, total)
	var held int
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "the relay exited (%d)\nstderr:\n%s", p.code, p.stderr)
		v, _ := metric(metricsText(t, base), "bridge_inflight_rows")
		held = e.inflightOwnedBy(t, "relay-hung")
		return v > 0 && held > 0
	}, "the relay never had rows in flight behind the frozen connection")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "the relay exited after the first signal with %d, before draining its %d in-flight rows\nstderr:\n%s", p.code, held, p.stderr)
		code, body := httpGet(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "draining")
	}, "/readyz never said draining after SIGTERM")
	// The notice is written to stderr before the drain starts, but the
	// pipe reader may not have copied it yet when /readyz already says so.
	poll(t, 5*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), "terminated received, stopping")
	}, "bridge run never said it received SIGTERM")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	second := time.Now()
	require.Equal(t, 1, p.wait(t, 3*time.Second), "bridge run after a second signal\nstderr:\n%s", p.stderr)
	t.Logf("exited %s after the second signal, holding %d leases", time.Since(second).Round(time.Millisecond), e.inflightOwnedBy(t, "relay-hung"))
	require.Contains(t, p.stderr.String(), "second interrupt, exiting at once")

	// The leases the hard exit left behind expire (3 s in crashEnv.relay)
	// and a new relay publishes those rows again; JetStream drops the
	// repeats of messages already stored.
	proxy.Thaw()
	next := e.relay(t, "relay-next")
	e.waitDone(t, total, 120*time.Second, next)
	e.verify(t, total)
}

// metricsText is the relay's /metrics body.
func metricsText(t *testing.T, base string) string {
	t.Helper()
	code, body := httpGet(base + "/metrics")
	require.Equal(t, http.StatusOK, code, "GET /metrics: %s", body)
	return body
}
