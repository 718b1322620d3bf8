package outbox

// testSignal marks a moment in one of the Subscriber's loops that a test
// can wait for, instead of polling for its effect or sleeping past a
// deadline (after river's rivershared/testsignal). Its zero value does
// nothing: outside tests, signal is one nil check. A test enables it
// (init, before the loop starts) and waits on it with the helpers of
// export_test.go.
type testSignal[T any] struct{ ch chan T }

// testSignalBuffer is how many signals an enabled testSignal keeps for
// the test to read; more are dropped, never waited for, so that a test
// that reads none cannot block the loop it watches.
const testSignalBuffer = 1000

// init enables s.
func (s *testSignal[T]) init() { s.ch = make(chan T, testSignalBuffer) }

// signal hands v to the test, when s is enabled.
func (s *testSignal[T]) signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}
