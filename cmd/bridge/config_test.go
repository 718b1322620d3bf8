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
