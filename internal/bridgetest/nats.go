package bridgetest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// NATS is a running in-process NATS server with JetStream.
type NATS struct {
	Server   *server.Server
	StoreDir string
	Port     int
}

// StartNATS starts a NATS server with JetStream on a free loopback port,
// storing in a temp dir, and stops it when the test ends.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	n := &NATS{StoreDir: t.TempDir(), Port: -1}
	n.start(t)
	t.Cleanup(n.Stop)
	return n
}

func (n *NATS) start(t testing.TB) {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: n.Port, JetStream: true, StoreDir: n.StoreDir,
		NoSigs: true, NoLog: true,
	})
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
	n.Server = srv
	n.Port = srv.Addr().(*net.TCPAddr).Port
}

// Stop shuts the server down; idempotent.
func (n *NATS) Stop() {
	if n.Server != nil {
		n.Server.Shutdown()
		n.Server.WaitForShutdown()
	}
}

// Restart starts a new server on the same port and store.
func (n *NATS) Restart(t testing.TB) {
	t.Helper()
	n.Stop()
	n.start(t)
}

// URL is the client URL.
func (n *NATS) URL() string { return n.Server.ClientURL() }

// JetStream connects a client for assertions, closed at the end of the test.
func (n *NATS) JetStream(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(n.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// CreateStream creates a stream with limits retention and a 2 min
// duplicate window.
func CreateStream(t testing.TB, js jetstream.JetStream, name string, subjects ...string) jetstream.Stream {
	t.Helper()
	s, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: name, Subjects: subjects, Duplicates: 2 * time.Minute, Storage: jetstream.FileStorage,
	})
	require.NoError(t, err)
	return s
}

// Messages reads every message of a stream in sequence order.
func Messages(t testing.TB, js jetstream.JetStream, stream string) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	total := int(info.State.Msgs)
	if total == 0 {
		return nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	out := make([]jetstream.Msg, 0, total)
	for len(out) < total {
		batch, err := c.Fetch(min(total-len(out), 1000), jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			out = append(out, m)
		}
		require.NoError(t, batch.Error())
	}
	return out
}
