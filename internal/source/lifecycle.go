package source

import (
	"context"
	"sync"
)

// Service is one of a source's jobs, each in its own goroutine: for the
// table source the claimer (the claim loop), the completer (writes
// settlements in batches), the rescuer (in-flight recovery) and retention
// (Retention: deletes old done rows). The source starts them as it
// subscribes and stops them as it closes, all the same way (after river's
// rivershared/startstop).
type Service interface {
	// Start runs the service in its own goroutine until Stop; the claimer
	// and the maintenance services (rescuer, retention) end with ctx too.
	// Starting a running service does nothing.
	Start(ctx context.Context)
	// Stop ends the service and returns once its goroutine has returned.
	// Stopping a service that is not running does nothing; a stopped
	// service may be started again.
	Stop()
}

// Closed reports whether ch is closed, without waiting.
func Closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// StartStop is the start/stop half of a Service, embedded by each: it
// runs the service's loop in a goroutine with a context that Stop cancels,
// and Stop waits for the loop to return. Its zero value is ready.
type StartStop struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	stopped chan struct{} // closed when run returned; nil when not started
}

// StartLoop runs run(ctx') in a new goroutine, ctx' ending with ctx or at
// Stop, unless the service runs already.
func (ss *StartStop) StartLoop(ctx context.Context, run func(ctx context.Context)) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.stopped != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	ss.cancel, ss.stopped = cancel, stopped
	go func() {
		defer close(stopped)
		run(ctx)
	}()
}

// Stop cancels the context of the running loop and waits for it to
// return.
func (ss *StartStop) Stop() {
	ss.mu.Lock()
	cancel, stopped := ss.cancel, ss.stopped
	ss.mu.Unlock()
	if stopped == nil {
		return
	}
	cancel()
	<-stopped
	ss.mu.Lock()
	if ss.stopped == stopped {
		ss.cancel, ss.stopped = nil, nil
	}
	ss.mu.Unlock()
}
