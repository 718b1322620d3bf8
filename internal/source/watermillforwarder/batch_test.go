package watermillforwarder_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder"
)

// TestBatchSize: a batch of messages of max_payload bytes fits
// relay.max_in_flight_bytes, however large relay.batch_size is; at least
// one message per batch; unchanged when max_payload is unknown.
func TestBatchSize(t *testing.T) {
	t.Parallel()
	const MiB = 1 << 20
	require.Equal(t, 32, watermillforwarder.BatchSize(500, 32*MiB, MiB), "defaults: 32 MiB of 1 MiB messages")
	require.Equal(t, 10, watermillforwarder.BatchSize(10, 32*MiB, MiB), "relay.batch_size when it is lower")
	require.Equal(t, 1, watermillforwarder.BatchSize(500, MiB, 8*MiB), "one message, however large")
	require.Equal(t, 500, watermillforwarder.BatchSize(500, 32*MiB, 0), "max_payload unknown")
}
