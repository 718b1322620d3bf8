package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder/watermillforwardertest"
)

// watermillEvents is what a Watermill service published through
// forwarder.Publisher in its business transactions.
type watermillEvents struct {
	mu         sync.Mutex
	committed  map[string][]byte // payload by message UUID
	rolledBack map[string]bool
	txs        int // committed transactions
}

// publish writes events [from, to) in transactions of 1 to 4 events,
// rolling back every 7th transaction.
func (w *watermillEvents) publish(ctx context.Context, svc *watermillforwardertest.Service, from, to int) error {
	for i, tx := from, from; i < to; tx++ {
		size := min(1+tx%4, to-i)
		msgs := make([]*message.Message, size)
		for j := range msgs {
			msgs[j] = message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"order":%d}`, i+j)))
			msgs[j].Metadata.Set("order_id", strconv.Itoa(i+j))
		}
		commit := tx%7 != 6
		if err := svc.Publish(ctx, commit, "events.order.created", msgs...); err != nil {
			return err
		}
		w.mu.Lock()
		for _, m := range msgs {
			if commit {
				w.committed[m.UUID] = m.Payload
			} else {
				w.rolledBack[m.UUID] = true
			}
		}
		if commit {
			w.txs++
		}
		w.mu.Unlock()
		i += size
	}
	return nil
}

// streamCount is the number of messages in stream, 0 while it does not
// exist.
func streamCount(t *testing.T, js jetstream.JetStream, stream string) int {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		return 0
	}
	return int(s.CachedInfo().State.Msgs)
}

// TestWatermillForwarderSIGKILLAndRestart is the switch of a Watermill
// service's forwarder daemon to the bridge: 1,000 events published through
// Watermill's forwarder.Publisher over watermill-sql's Publisher inside
// business transactions (every 7th rolled back) reach the stream exactly
// once each, none of the rolled-back ones, while the real binary is killed
// with SIGKILL in the middle of the run and started again.
//
// Waits are long: watermill-sql's PostgreSQL query reads only rows of
// transactions older than every transaction running on the server, so a
// long transaction of a test running beside this one holds it back.
func TestWatermillForwarderSIGKILLAndRestart(t *testing.T) {
	t.Parallel()
	const total = 1000
	pgURL := bridgetest.PostgresURL(t)
	svc := watermillforwardertest.NewService(t, pgURL)
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	dir := t.TempDir()
	env := []string{
		"BRIDGE_SOURCE=watermill-forwarder",
		"BRIDGE_WATERMILL_FORWARDER_TOPIC=" + svc.Topic,
		"BRIDGE_DATABASE_URL=" + pgURL,
		"BRIDGE_NATS_URL=" + n.URL(),
		"BRIDGE_HTTP_LISTEN=127.0.0.1:0",
		"BRIDGE_RELAY_BATCH_SIZE=100",
		"BRIDGE_RELAY_POLL_INTERVAL=50ms",
		"BRIDGE_LOG_LEVEL=warn",
	}
	args := []string{"run", "--ensure-stream", "EVENTS:events.>"}

	// Before `bridge migrate` the offsets table is missing: the relay
	// waits for it (a migration job may run after the relay starts),
	// naming the fix in each attempt's log line.
	runWaiting(t, dir, env, args, watermillforwarder.OffsetsTable(svc.Topic), "bridge migrate")
	r := runBridge(t, dir, env, "migrate")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "created offsets table "+watermillforwarder.OffsetsTable(svc.Topic))
	r = runBridge(t, dir, env, "migrate")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "is up to date")

	ctx := context.Background()
	events := &watermillEvents{committed: map[string][]byte{}, rolledBack: map[string]bool{}}
	require.NoError(t, events.publish(ctx, svc, 0, total/2))

	first := start(t, dir, env, args...)
	poll(t, 5*time.Minute, func() bool {
		require.False(t, first.exited(), "bridge exited (%d)\nstderr:\n%s", first.code, first.stderr)
		return streamCount(t, js, "EVENTS") >= 150
	}, "the first bridge relays")
	// The service goes on writing while the bridge runs, is killed and restarts.
	produced := make(chan error, 1)
	go func() { produced <- events.publish(ctx, svc, total/2, total) }()
	poll(t, 5*time.Minute, func() bool { return streamCount(t, js, "EVENTS") >= 300 }, "the first bridge relays")
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	first.wait(t, 10*time.Second)
	atKill := streamCount(t, js, "EVENTS")

	port := freePort(t)
	envSecond := append(append([]string{}, env...), "BRIDGE_HTTP_LISTEN=127.0.0.1:"+strconv.Itoa(port))
	second := start(t, dir, envSecond, args...)
	require.NoError(t, <-produced)
	committed := len(events.committed)
	require.Less(t, atKill, committed, "SIGKILL came in the middle of the run")
	poll(t, 5*time.Minute, func() bool {
		require.False(t, second.exited(), "bridge exited (%d)\nstderr:\n%s", second.code, second.stderr)
		return streamCount(t, js, "EVENTS") >= committed
	}, "every committed event reaches the stream")

	// Readiness and metrics work for this source too.
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	dedups := regexp.MustCompile(`(?m)^bridge_watermill_messages_deduplicated_total (\S+)$`).FindSubmatch(metrics)
	require.NotNil(t, dedups, "metrics:\n%s", metrics)

	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, second.wait(t, 30*time.Second), "SIGTERM stops cleanly\nstderr:\n%s", second.stderr)

	msgs := bridgetest.Messages(t, js, "EVENTS")
	require.Len(t, msgs, committed, "exactly one stream message per committed event")
	seen := map[string]bool{}
	for _, m := range msgs {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		require.False(t, seen[id], "Nats-Msg-Id %s twice", id)
		seen[id] = true
		require.False(t, events.rolledBack[id], "event %s of a rolled-back transaction reached the stream", id)
		payload, ok := events.committed[id]
		require.True(t, ok, "Nats-Msg-Id %s is no committed event's UUID", id)
		require.Equal(t, payload, m.Data())
		require.Equal(t, "events.order.created", m.Subject())
		require.Equal(t, id, m.Headers().Get("Outbox-Idempotency-Key"))
		require.Equal(t, strings.TrimSuffix(strings.TrimPrefix(string(payload), `{"order":`), "}"), m.Headers().Get("order_id"))
	}
	require.Len(t, seen, committed)
	require.Equal(t, events.txs, svc.BusinessRows(t))
	t.Logf("%d events, %d committed, %d rolled back; %d in the stream at SIGKILL; the restarted bridge republished %s already stored (deduplicated)",
		total, committed, len(events.rolledBack), atKill, dedups[1])
}

// TestWatermillForwarderRefusals: SQLite cannot be read with watermill-sql,
// and the commands that work on the bridge table say so, exit 2.
func TestWatermillForwarderRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runBridge(t, dir, []string{"BRIDGE_SOURCE=watermill-forwarder"}, "run", "--check-config")
	require.Equal(t, 2, r.code, "%s", r)
	require.Contains(t, r.stderr, "database.url")
	require.Contains(t, r.stderr, "watermill-sql has no SQLite schema")

	env := []string{"BRIDGE_SOURCE=watermill-forwarder", "BRIDGE_DATABASE_URL=" + bridgetest.PostgresURL(t)}
	for _, args := range [][]string{
		{"status"},
		{"enqueue", "--subject", "events.x", "--data", "x"},
		{"requeue", "--older-than", "1m"},
	} {
		r := runBridge(t, dir, env, args...)
		require.Equal(t, 2, r.code, "bridge %s\n%s", strings.Join(args, " "), r)
		require.Contains(t, r.stderr, "bridge table only", "bridge %s", strings.Join(args, " "))
	}
}
