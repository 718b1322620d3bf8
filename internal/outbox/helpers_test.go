package outbox_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitLimit bounds waitFor.
const waitLimit = 10 * time.Second

// waitFor calls cond on the test goroutine, every 10 ms, until it returns
// true, failing the test when waitLimit passes first. Unlike
// require.Eventually, which calls cond on a goroutine of its own, cond may
// use require: a failure there fails the test at once, with its message,
// instead of showing as a timeout.
func waitFor(t *testing.T, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			require.FailNow(t, fmt.Sprintf("condition not met within %s", waitLimit), msgAndArgs...)
		case <-tick.C:
		}
	}
}

// onEveryDatabase runs test against each database kind (kinds), each in
// a parallel subtest with its own table.
func onEveryDatabase(t *testing.T, test func(t *testing.T, kind string)) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			test(t, kind)
		})
	}
}
