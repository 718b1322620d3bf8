package table

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRescueRetryBacksOff: after failed in-flight recoveries in a row the
// rescuer waits the interval, then twice as long per further failure, up
// to a minute (an interval longer than that stays as it is).
func TestRescueRetryBacksOff(t *testing.T) {
	for failures, want := range map[int]time.Duration{0: 3 * time.Second, 1: 3 * time.Second, 2: 6 * time.Second, 3: 12 * time.Second, 6: time.Minute, 100: time.Minute} {
		require.Equal(t, want, rescueRetry(3*time.Second, failures), "after %d failures", failures)
	}
	require.Equal(t, 2*time.Minute, rescueRetry(2*time.Minute, 5))
}
