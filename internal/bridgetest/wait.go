package bridgetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// WaitFor calls cond on the test goroutine, every 10 ms, until it returns
// true, failing the test when d passes first. Unlike require.Eventually,
// which calls cond on a goroutine of its own, cond may use require: a
// failure there (a query that fails) fails the test at once, with its
// message, instead of showing as a timeout.
func WaitFor(t testing.TB, d time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			require.FailNow(t, fmt.Sprintf("condition not met within %s", d), msgAndArgs...)
		case <-tick.C:
		}
	}
}
