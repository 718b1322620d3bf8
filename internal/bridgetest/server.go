package bridgetest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// StartNATSWithOptions starts a NATS server with JetStream on a free
// loopback port, storing in a temp dir, after configure has adjusted its
// options (TLS, authentication, operator mode). The server is shut down
// when the test ends. Its client port is srv.Addr().
func StartNATSWithOptions(t testing.TB, configure func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoSigs: true, NoLog: true,
	}
	if configure != nil {
		configure(opts)
	}
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
	return srv
}
