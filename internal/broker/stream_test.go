package broker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/health"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestEnsureStreamsExistingStream: an existing stream is never changed;
// when it does not capture every requested subject, a warning names the
// subjects left out.
func TestEnsureStreamsExistingStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>", "audit.*")

	for _, tc := range []struct {
		name      string
		requested []string
		missing   []any // nil: covered, an INFO line
	}{
		{"same subjects", []string{"events.>", "audit.*"}, nil},
		{"subsets", []string{"events.order.created", "events.*", "events.a.>", "audit.login"}, nil},
		{"other subject", []string{"orders.>"}, []any{"orders.>"}},
		{"wider than the stream", []string{"events.a", "audit.>", "audit.x.y"}, []any{"audit.>", "audit.x.y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bridgetest.SyncBuffer
			logger := slog.New(slog.NewJSONHandler(&logs, nil))
			err := broker.EnsureStreams(ctx, js, []broker.StreamSpec{{Name: "EVENTS", Subjects: tc.requested}}, logger)
			require.NoError(t, err)

			records := logs.Records(t)
			require.Len(t, records, 1)
			r := records[0]
			require.Equal(t, "EVENTS", r["stream"])
			require.Equal(t, []any{"events.>", "audit.*"}, r["subjects"], "the stream's own subjects")
			if tc.missing == nil {
				require.Equal(t, "INFO", r["level"])
				require.Equal(t, "stream present", r["msg"])
				return
			}
			require.Equal(t, "WARN", r["level"])
			require.Contains(t, r["msg"], "does not change existing streams")
			require.Equal(t, tc.missing, r["subjects_not_covered"])
		})
	}

	s, err := js.Stream(ctx, "EVENTS")
	require.NoError(t, err)
	require.Equal(t, []string{"events.>", "audit.*"}, s.CachedInfo().Config.Subjects, "the stream was not changed")
}

// TestEnsureStreamsOnACluster: on a 3-node cluster a stream configured
// with replicas 0 (auto, the default) is created with 3 replicas; an
// existing stream with other replicas, storage or duplicate window is
// reported once at WARN, as degraded readiness and as
// bridge_stream_config_drift, and left as it is.
func TestEnsureStreamsOnACluster(t *testing.T) {
	t.Parallel()
	// Stream creation on a cluster waits for the stream's Raft group; on
	// a loaded machine that took more than jetstream's default 5 s.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c := bridgetest.StartCluster(t)
	nc, err := nats.Connect(c.URLs())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(30*time.Second))
	require.NoError(t, err)
	require.Equal(t, 3, broker.ClusterReplicas(nc))
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "OLD", Subjects: []string{"old.>"}, Replicas: 1, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)

	var logs bridgetest.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	specs := []broker.StreamSpec{
		{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: 2 * time.Minute},
		{Name: "OLD", Subjects: []string{"old.>"}, Duplicates: time.Minute, Storage: "file"},
	}
	require.NoError(t, broker.EnsureStreams(ctx, js, specs, logger))
	s, err := js.Stream(ctx, "EVENTS")
	require.NoError(t, err)
	require.Equal(t, 3, s.CachedInfo().Config.Replicas, "auto replicas on a 3-node cluster")
	require.Equal(t, 3, specs[0].Replicas)
	require.Empty(t, specs[0].Drift)
	require.Equal(t, "replicas 1, configured 3; storage memory, configured file; duplicate window 2m0s, configured 1m0s", specs[1].Drift)

	var warned int
	for _, r := range logs.Records(t) {
		if r["level"] == "WARN" {
			warned++
			require.Equal(t, "OLD", r["stream"])
			require.Equal(t, specs[1].Drift, r["differs"])
		}
	}
	require.Equal(t, 1, warned, "the drift is logged once")
	old, err := js.Stream(ctx, "OLD")
	require.NoError(t, err)
	require.Equal(t, 1, old.CachedInfo().Config.Replicas, "the existing stream is not changed")

	k := broker.NewKeeper(js, specs, logger)
	err = k.Check(ctx)
	require.Error(t, err)
	require.True(t, health.IsDegraded(err), "a drift is degraded readiness, not a failure: %v", err)
	require.Contains(t, err.Error(), "stream OLD differs from its configuration: replicas 1, configured 3")
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(k.Collector()))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP bridge_stream_config_drift 1 for an ensured stream that exists with other replicas, storage, subjects or duplicate window than configured (see the WARN line at start).
# TYPE bridge_stream_config_drift gauge
bridge_stream_config_drift{stream="EVENTS"} 0
bridge_stream_config_drift{stream="OLD"} 1
`), "bridge_stream_config_drift"))
}

// TestClusterReplicasSingleServer: auto replicas on one server are 1.
func TestClusterReplicasSingleServer(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	nc, _ := n.JetStream(t)
	require.Equal(t, 1, broker.ClusterReplicas(nc))
}
