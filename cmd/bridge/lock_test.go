package main

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSecondRunInTheSameDataDirIsRefused: two embedded servers on one
// JetStream store would hand out the same stream sequences and lose
// acknowledged messages, so the second `bridge run` refuses to start.
func TestSecondRunInTheSameDataDirIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startRelay(t, dir)
	second := start(t, dir, nil, "run", "--nats-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--http-listen", "127.0.0.1:0")
	code := second.wait(t, 30*time.Second)
	require.NotZero(t, code)
	require.Contains(t, second.stderr.String(), "locked by another process")
	require.Contains(t, second.stderr.String(), "--data-dir")
	require.False(t, first.exited(), "the first relay keeps running")

	// Once the first stops, the store is free again.
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, first.wait(t, 30*time.Second))
	startRelay(t, dir)
}
