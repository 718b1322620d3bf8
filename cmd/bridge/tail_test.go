package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// tail names the server it connected to; without a stream for its subject
// it exits 1 pointing at --wait, and with --wait it waits for the stream
// and then prints what arrives on it.
func TestTailWaitsForTheStream(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	dir := t.TempDir()

	r := runBridge(t, dir, nil, "tail", "--subject", "events.>", "--nats-url", n.URL())
	require.Equal(t, 1, r.code, "tail without a stream\n%s", r)
	require.Contains(t, r.stderr, "connected to "+n.URL())
	require.Contains(t, r.stderr, "no stream captures subject events.>")
	require.Contains(t, r.stderr, "--wait")

	tail := start(t, dir, nil, "tail", "--subject", "events.>", "--wait", "--nats-url", n.URL())
	poll(t, 30*time.Second, func() bool {
		return tail.exited() || strings.Contains(tail.stderr.String(), "waiting for one (--wait)")
	}, "tail --wait never said it waits\nstderr:\n%s", tail.stderr)
	require.False(t, tail.exited(), "tail --wait exited with %d\nstderr:\n%s", tail.code, tail.stderr)
	require.Contains(t, tail.stderr.String(), "(server "+n.Server.Name()+", nats-server ")

	_, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	poll(t, 30*time.Second, func() bool {
		return tail.exited() || strings.Contains(tail.stderr.String(), "tailing events.> on stream EVENTS")
	}, "tail --wait never started tailing\nstderr:\n%s", tail.stderr)
	_, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: "events.late", Data: []byte("arrived late")})
	require.NoError(t, err)
	poll(t, 30*time.Second, func() bool {
		return tail.exited() || strings.Contains(tail.stdout.String(), "arrived late")
	}, "tail --wait never printed the message\nstdout:\n%s", tail.stdout)

	require.NoError(t, tail.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, tail.wait(t, 30*time.Second))
}
