package bridgetest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
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

// StartNATSOn is StartNATS on a given port: a server that appears at an
// address a client was already given.
func StartNATSOn(t testing.TB, port int) *NATS {
	t.Helper()
	n := &NATS{StoreDir: t.TempDir(), Port: port}
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
	// A cluster that just lost a server may answer "no responders" for a
	// while; read again until the deadline.
	deadline := time.Now().Add(60 * time.Second)
	for {
		msgs, err := readStream(js, stream)
		if err == nil || time.Now().After(deadline) {
			require.NoError(t, err, "read stream %s", stream)
			return msgs
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func readStream(js jetstream.JetStream, stream string) ([]jetstream.Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	total := int(s.CachedInfo().State.Msgs)
	if total == 0 {
		return nil, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	out := make([]jetstream.Msg, 0, total)
	for len(out) < total {
		batch, err := c.Fetch(min(total-len(out), 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Cluster is three in-process NATS servers with JetStream, routed to each
// other on loopback, on fixed ports so that a server stopped and started
// again (Stop, Restart) is found where the clients were told it is.
type Cluster struct {
	Servers []*server.Server
	opts    []*server.Options
}

// freePorts returns n free loopback ports.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports[i] = l.Addr().(*net.TCPAddr).Port
		require.NoError(t, l.Close())
	}
	return ports
}

// StartCluster starts a 3-node JetStream cluster and waits until every
// server reaches its meta leader. Servers are shut down when the test ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	// The ports are found free and then bound by the servers: another
	// process (a second test run) can take one in between. A cluster whose
	// servers do not all start is shut down and started again on new
	// ports.
	for attempt := 1; ; attempt++ {
		if c, ok := startCluster(t, attempt == 3); ok {
			return c
		}
		t.Logf("a server of the cluster did not start (a port taken meanwhile?); starting the cluster again on new ports")
	}
}

// startCluster starts the cluster on new ports; false when a server did
// not become ready, after shutting the started ones down. With last, that
// fails the test instead.
func startCluster(t testing.TB, last bool) (*Cluster, bool) {
	t.Helper()
	const size = 3
	routePorts, clientPorts := freePorts(t, size), freePorts(t, size)
	var routes []*url.URL
	for _, p := range routePorts {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	c := &Cluster{Servers: make([]*server.Server, size)}
	for i := range size {
		c.opts = append(c.opts, &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1", Port: clientPorts[i],
			JetStream: true, StoreDir: t.TempDir(),
			Cluster: server.ClusterOpts{Name: "bridge-test", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:  routes,
			NoSigs:  true, NoLog: true,
		})
		c.start(t, i)
	}
	shutdown := func() {
		for _, srv := range c.Servers {
			srv.Shutdown()
			srv.WaitForShutdown()
		}
	}
	for _, srv := range c.Servers {
		if !srv.ReadyForConnections(10 * time.Second) {
			require.False(t, last, "server %s of the cluster did not start", srv.Name())
			shutdown()
			return nil, false
		}
	}
	t.Cleanup(shutdown)
	c.waitFormed(t)
	return c, true
}

// waitFormed waits until the cluster has a meta leader that every server
// reaches: a JetStream API request sent to each server is answered. Only
// the meta leader answers stream and account requests; a server whose
// routes to the leader are not up yet drops the request unanswered, and
// the client waits its whole timeout (nats-server's jsAccountInfoRequest
// and jsStreamCreateRequest return without a reply on a non-leader), so a
// meta leader alone is not a formed cluster.
func (c *Cluster) waitFormed(t testing.TB) {
	t.Helper()
	for _, srv := range c.Servers {
		nc, err := nats.Connect(srv.ClientURL())
		require.NoError(t, err)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := js.AccountInfo(ctx)
			return err == nil
		}, 60*time.Second, 50*time.Millisecond, "server %s reaches no JetStream meta leader", srv.Name())
		nc.Close()
	}
}

func (c *Cluster) start(t testing.TB, i int) {
	t.Helper()
	opts := *c.opts[i]
	srv, err := server.NewServer(&opts)
	require.NoError(t, err)
	go srv.Start()
	c.Servers[i] = srv
}

func (c *Cluster) index(t testing.TB, name string) int {
	t.Helper()
	for i, o := range c.opts {
		if o.ServerName == name {
			return i
		}
	}
	require.Failf(t, "no such server", "%s", name)
	return -1
}

// Stop shuts the server named name down, keeping its store.
func (c *Cluster) Stop(t testing.TB, name string) {
	t.Helper()
	srv := c.Servers[c.index(t, name)]
	srv.Shutdown()
	srv.WaitForShutdown()
}

// Restart starts the server named name again on its ports and store.
func (c *Cluster) Restart(t testing.TB, name string) {
	t.Helper()
	i := c.index(t, name)
	c.start(t, i)
	require.True(t, c.Servers[i].ReadyForConnections(10*time.Second), "%s did not start again", name)
}

// URLs is the comma-separated client URLs of all servers.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Server returns the server named name (n1, n2, n3).
func (c *Cluster) Server(name string) *server.Server {
	for _, s := range c.Servers {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// WaitMessages returns once stream holds at least n messages, reading them
// as the server stores them through an ordered consumer (a push of each
// message, not a poll of the stream's state), and fails the test when d
// passes first.
func WaitMessages(t testing.TB, js jetstream.JetStream, stream string, n int, d time.Duration) {
	t.Helper()
	if n <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err, "consumer of stream %s", stream)
	it, err := c.Messages()
	require.NoError(t, err, "consumer of stream %s", stream)
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for got := 0; got < n; got++ {
		if _, err := it.Next(); err != nil {
			t.Fatalf("stream %s: %d of %d messages within %s (%v)", stream, got, n, d, err)
		}
	}
}
