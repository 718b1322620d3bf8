package main

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// TestReconcileBeyondTheDuplicateWindow: the stream forgets a Nats-Msg-Id
// three seconds after storing it. Relay A publishes rows and is frozen
// (SIGSTOP) before marking them; it stays frozen past the window and its
// lease. Relay B takes the rows over: republishing them would store
// duplicates, so B first finds them in the stream and marks them relayed.
// The stream holds exactly one message per row.
func TestReconcileBeyondTheDuplicateWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	e := newCrashEnv(t, n.URL(), 1)
	_, err := e.js.UpdateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: 3 * time.Second})
	require.NoError(t, err)
	const total = 5000
	e.insert(t, 0, total)

	// Lease and timeouts short enough for the guard to accept a 3 s window.
	// Not shorter: the window only protects a republish when the earlier
	// publish reached the server within publish_timeout, and on a loaded
	// 2-core machine under -race a 200 ms publish_timeout (with a 1 s
	// window) was exceeded, storing duplicates without any relay fault.
	short := []string{"BRIDGE_RELAY_PUBLISH_TIMEOUT=600ms", "BRIDGE_RELAY_ACK_DEADLINE=1200ms", "BRIDGE_RELAY_INFLIGHT_TIMEOUT=1800ms"}
	a := e.relay(t, "relay-a", append(short, "BRIDGE_RELAY_BATCH_SIZE=200", "BRIDGE_RELAY_MAX_IN_FLIGHT=400")...)
	stored := func() int {
		s, err := e.js.Stream(ctx, "EVENTS")
		require.NoError(t, err)
		return int(s.CachedInfo().State.Msgs)
	}
	// Freeze A while some of its rows are in the stream but not yet marked.
	// A mark already on its way to the database still commits after the
	// freeze, so count after a pause, and try again when nothing was left.
	var unmarked int
	for attempt := 1; unmarked == 0; attempt++ {
		require.LessOrEqual(t, attempt, 10, "relay-a never froze with published rows unmarked")
		poll(t, 60*time.Second, func() bool {
			require.False(t, a.exited(), "relay-a exited\n%s", a.stderr)
			return e.count(t, "done") < total && stored() > e.count(t, "done")
		}, "relay-a never had published rows awaiting their mark")
		require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP))
		// Past the duplicate window (3 s) and the lease (1.8 s).
		<-time.After(4 * time.Second)
		if unmarked = stored() - e.count(t, "done"); unmarked == 0 {
			require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
		}
	}
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })

	httpB := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	b := e.relay(t, "relay-b", append(short, "BRIDGE_HTTP_LISTEN="+httpB)...)
	e.waitDone(t, total, 120*time.Second, b)
	e.verify(t, total)

	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + httpB + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	reconciled := metricValue(readAll(resp), "bridge_rows_reconciled_total")
	t.Logf("relay-a was frozen with %d rows stored but not marked; relay-b reconciled %.0f rows", unmarked, reconciled)
	require.GreaterOrEqual(t, reconciled, float64(unmarked), "every stored, unmarked row was found instead of republished")
}
