package dedup

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestGuardInspect covers the rules one by one, including a max age below
// the window, which nats-server 2.15 itself refuses to create (error 10052)
// but older servers and hand-edited stream configs can still hold.
func TestGuardInspect(t *testing.T) {
	t.Parallel()
	g := &Guard{horizon: 35 * time.Second}
	safe := jetstream.StreamConfig{Retention: jetstream.LimitsPolicy, Duplicates: 2 * time.Minute}
	require.Nil(t, g.inspect("S", safe))

	aged := safe
	aged.MaxAge = time.Minute
	require.Contains(t, g.inspect("S", aged).Problem, "max age 1m0s is shorter than the duplicate window 2m0s")

	short := safe
	short.Duplicates = 35*time.Second - time.Millisecond
	require.Contains(t, g.inspect("S", short).Problem, "shorter than the relay's redelivery horizon 35s")
	short.Duplicates = 35 * time.Second
	require.Nil(t, g.inspect("S", short), "a window equal to the horizon is enough")

	wq := safe
	wq.Retention = jetstream.WorkQueuePolicy
	require.Contains(t, g.inspect("S", wq).Error(), "stream S cannot deduplicate")
}
