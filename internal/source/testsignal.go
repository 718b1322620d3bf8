package source

import (
	"fmt"
	"time"
)

// TB is what a TestSignal's waits need of a test: testing.TB has it. The
// package does not import testing, so that the relay's binary does not
// link it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// TestSignal marks a moment in one of a source's loops that a test can
// wait for, instead of polling for its effect or sleeping past a deadline
// (after river's rivershared/testsignal). Its zero value does nothing:
// outside tests, Signal is one nil check. A test enables it (Enable,
// before the loop starts) and waits on it (Wait).
type TestSignal[T any] struct{ ch chan T }

// testSignalBuffer is how many signals an enabled TestSignal keeps for
// the test to read; more are dropped, never waited for, so that a test
// that reads none cannot block the loop it watches.
const testSignalBuffer = 1000

// TestSignalTimeout is how long Wait waits.
const TestSignalTimeout = 10 * time.Second

// NewTestSignal returns an enabled TestSignal, to set where a source's
// signals are pointers (a nil one does nothing): one signal may then watch
// several sources.
func NewTestSignal[T any]() *TestSignal[T] {
	s := new(TestSignal[T])
	s.Enable()
	return s
}

// Enable makes s keep what is signalled, for Wait. Call it before the loop
// it watches starts.
func (s *TestSignal[T]) Enable() { s.ch = make(chan T, testSignalBuffer) }

// Signal hands v to the test, when s is enabled.
func (s *TestSignal[T]) Signal(v T) {
	if s == nil || s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// C is the channel the values signalled go to, for a test that watches
// them from a goroutine of its own (where it may not fail the test); nil
// until Enable.
func (s *TestSignal[T]) C() <-chan T { return s.ch }

// Wait returns the oldest value signalled and not read yet (values are
// kept from Enable on: Clear first to wait for a later one), failing the test when none comes
// within TestSignalTimeout.
func (s *TestSignal[T]) Wait(t TB) T {
	t.Helper()
	timer := time.NewTimer(TestSignalTimeout)
	defer timer.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-timer.C:
		t.Fatalf("no signal within %s", TestSignalTimeout)
		panic("unreachable")
	}
}

// WaitUntil returns once cond holds: it asks cond now and again after each
// value signalled (the moment that can change what cond reads), and fails
// the test, with what, when TestSignalTimeout passes first. A value
// signalled between a check and the wait is kept, so none is missed.
func (s *TestSignal[T]) WaitUntil(t TB, cond func() bool, what ...any) {
	t.Helper()
	s.WaitUntilWithin(t, TestSignalTimeout, cond, what...)
}

// WaitUntilWithin is WaitUntil with its own bound d, for a wait that
// covers much work (thousands of rows relayed).
func (s *TestSignal[T]) WaitUntilWithin(t TB, d time.Duration, cond func() bool, what ...any) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for !cond() {
		select {
		case <-s.ch:
		case <-timer.C:
			t.Fatalf("not within %s: %s", d, fmt.Sprint(what...))
		}
	}
}

// Clear drops the values signalled so far.
func (s *TestSignal[T]) Clear() {
	for {
		select {
		case <-s.ch:
		default:
			return
		}
	}
}

// RequireNone fails the test when a value was signalled.
func (s *TestSignal[T]) RequireNone(t TB, msgAndArgs ...any) {
	t.Helper()
	select {
	case v := <-s.ch:
		t.Fatalf("signalled %v %s", v, fmt.Sprint(msgAndArgs...))
	default:
	}
}
