package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// guardStream starts a NATS server holding one stream as cfg says and
// returns its URL.
func guardStream(t *testing.T, cfg jetstream.StreamConfig) string {
	t.Helper()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	_, err := js.CreateStream(context.Background(), cfg)
	require.NoError(t, err)
	return n.URL()
}

// TestUnsafeEnsuredStreamIsHeldBack: a stream the relay ensures exists,
// but an operator made it unsafe (WorkQueue or Interest retention, a short
// duplicate window). The relay starts all the same — an exit would make
// every restart of a running deployment exit again — holds back that
// stream's rows, names it in /readyz, and relays the other stream's rows.
// Only a stream spec of the configuration that is unsafe itself is a
// configuration error (exit 2).
func TestUnsafeEnsuredStreamIsHeldBack(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  jetstream.StreamConfig
		want []string
	}{
		{"work queue", jetstream.StreamConfig{Name: "WQ", Subjects: []string{"held.>"}, Retention: jetstream.WorkQueuePolicy, Duplicates: 5 * time.Minute},
			[]string{"stream WQ", "WorkQueue", "nats-server#3272"}},
		{"interest", jetstream.StreamConfig{Name: "INT", Subjects: []string{"held.>"}, Retention: jetstream.InterestPolicy, Duplicates: 5 * time.Minute},
			[]string{"stream INT", "Interest"}},
		{"short window", jetstream.StreamConfig{Name: "SHORT", Subjects: []string{"held.>"}, Duplicates: time.Second},
			[]string{"stream SHORT", "duplicate window 1s", "redelivery horizon 35s", "at least 35s"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := guardStream(t, c.cfg)
			e := newIsoEnv(t, "sqlite", url)
			held := e.insert(t, "held", "held.x")
			flowing := e.insert(t, "flowing", "events.x")
			p, base := e.run(t, "--ensure-stream", c.cfg.Name+":held.>", "--ensure-stream", "EVENTS:events.>")
			e.waitRows(t, p, 30*time.Second, "done", flowing)
			e.waitRows(t, p, 30*time.Second, "failed", held)
			r := e.row(t, held)
			require.Zero(t, r.Attempts)
			for _, w := range c.want {
				require.Contains(t, r.LastError, w)
			}
			code, body := httpGet(base + "/readyz")
			require.Equal(t, http.StatusOK, code, "%s", body)
			require.Contains(t, body, "rows held back: stream "+c.cfg.Name)
		})
	}
	t.Run("configured spec", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		cfg := filepath.Join(dir, "bridge.yaml")
		require.NoError(t, os.WriteFile(cfg, []byte("streams:\n  - name: SHORT\n    subjects: [events.>]\n    duplicates: 5s\n"), 0o600))
		r := runBridge(t, dir, nil, "run", "--config", cfg, "--nats-url", "nats://127.0.0.1:1", "--http-listen", "127.0.0.1:0")
		require.Equal(t, 2, r.code, "%s", r)
		require.Contains(t, r.stderr, "streams[0].duplicates")
		require.Contains(t, r.stderr, "stream SHORT must be at least 35s")
	})
}

func TestGuardWarnRunsAndLogsOnce(t *testing.T) {
	t.Parallel()
	url := guardStream(t, jetstream.StreamConfig{Name: "SHORT", Subjects: []string{"events.>"}, Duplicates: time.Second})
	dir := t.TempDir()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	run := start(t, dir, []string{"BRIDGE_DEDUP_GUARD=warn"}, "run", "--nats-url", url, "--http-listen", httpAddr,
		"--ensure-stream", "SHORT:events.>")
	client := &http.Client{Timeout: 2 * time.Second}
	poll(t, 30*time.Second, func() bool {
		require.False(t, run.exited(), "bridge run exited: %d\n%s", run.code, run.stderr)
		resp, err := client.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "relay never became ready")
	for i := range 3 {
		r := runBridge(t, dir, nil, "enqueue", "--subject", "events.g", "--data", fmt.Sprint(i))
		require.Equal(t, 0, r.code, "%s", r)
	}
	poll(t, 30*time.Second, func() bool { return status(t, dir).Rows["done"] == 3 }, "rows not relayed")
	require.Equal(t, 1, strings.Count(run.stderr.String(), "stream cannot deduplicate republishes"), run.stderr.String())
}
