package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBadConfigFileRefusedAtStart: `bridge run --config FILE` refuses each
// bad file before touching anything, exit 2, naming the key.
func TestBadConfigFileRefusedAtStart(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, yaml, key string }{
		{"unknown key", "relay:\n  batch_size: 100\n  inflight_timout: 30s\n", "relay.inflight_timout"},
		{"negative duration", "relay:\n  poll_interval: -250ms\n", "relay.poll_interval"},
		{"publish timeout not below inflight timeout", "relay:\n  publish_timeout: 30s\n  inflight_timeout: 30s\n", "relay.publish_timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			file := filepath.Join(dir, "bridge.yaml")
			require.NoError(t, os.WriteFile(file, []byte(c.yaml), 0o600))
			r := runBridge(t, dir, nil, "run", "--config", file, "--http-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0")
			require.Equal(t, 2, r.code, "%s", r)
			require.Contains(t, r.stderr, c.key)
			_, err := os.Stat(filepath.Join(dir, "bridge-data"))
			require.True(t, os.IsNotExist(err), "nothing was created before the configuration was checked")
		})
	}
}

// TestConfigOutputReadsBack: `bridge config` prints a configuration that
// `run --check-config --config` accepts, and leaves relay.owner empty when
// it is the default, so that every process reading it back gets its own
// <hostname>-<pid> rather than the printing command's.
func TestConfigOutputReadsBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runBridge(t, dir, nil, "config")
	require.Equal(t, 0, r.code, "bridge config\n%s", r)
	require.Contains(t, r.stdout, "owner: \"\"")
	file := filepath.Join(dir, "printed.yaml")
	require.NoError(t, os.WriteFile(file, []byte(r.stdout), 0o600))
	r = runBridge(t, dir, nil, "run", "--check-config", "--config", file)
	require.Equal(t, 0, r.code, "bridge run --check-config on bridge config's output\n%s", r)

	r = runBridge(t, dir, []string{"BRIDGE_RELAY_OWNER=pod-a"}, "config")
	require.Equal(t, 0, r.code, "bridge config\n%s", r)
	require.Contains(t, r.stdout, "owner: pod-a", "a configured owner is shown")
}
