package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// tail names the server it connected to; without a server or a stream for
// its subject it exits 1 pointing at --wait, and with --wait, started before
// anything runs (as before bridge run), it waits for the server, then for
// the stream, and then prints what arrives on it.
func TestTailWaitsForTheServerAndTheStream(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)

	r := runBridge(t, dir, nil, "tail", "--subject", "events.>", "--nats-url", url)
	require.Equal(t, 1, r.code, "tail without a server\n%s", r)
	require.Contains(t, r.stderr, "no servers available")

	tail := start(t, dir, nil, "tail", "--subject", "events.>", "--wait", "--nats-url", url)
	poll(t, 30*time.Second, func() bool {
		return tail.exited() || strings.Contains(tail.stderr.String(), "waiting for it (--wait)")
	}, "tail --wait never said it waits for the server\nstderr:\n%s", tail.stderr)
	require.False(t, tail.exited(), "tail --wait exited with %d\nstderr:\n%s", tail.code, tail.stderr)

	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) { o.Port = port })
	poll(t, 30*time.Second, func() bool {
		return tail.exited() || strings.Contains(tail.stderr.String(), "waiting for one (--wait)")
	}, "tail --wait never connected and waited for the stream\nstderr:\n%s", tail.stderr)
	require.False(t, tail.exited(), "tail --wait exited with %d\nstderr:\n%s", tail.code, tail.stderr)
	require.Contains(t, tail.stderr.String(), "connected to "+url+" (server "+srv.Name()+", nats-server ")

	r = runBridge(t, dir, nil, "tail", "--subject", "events.>", "--nats-url", url)
	require.Equal(t, 1, r.code, "tail without a stream\n%s", r)
	require.Contains(t, r.stderr, "no stream captures subject events.>")
	require.Contains(t, r.stderr, "--wait")

	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	poll(t, 30*time.Second, func() bool {
		return tail.exited() || strings.Contains(tail.stderr.String(), "tailing events.> on stream EVENTS")
	}, "tail --wait never started tailing\nstderr:\n%s", tail.stderr)
	_, err = js.PublishMsg(context.Background(), &nats.Msg{Subject: "events.late", Data: []byte("arrived late")})
	require.NoError(t, err)
	poll(t, 30*time.Second, func() bool {
		return tail.exited() || strings.Contains(tail.stdout.String(), "arrived late")
	}, "tail --wait never printed the message\nstdout:\n%s", tail.stdout)

	require.NoError(t, tail.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, tail.wait(t, 30*time.Second))
}
