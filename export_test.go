package bridge

import (
	"fmt"
	"time"
)

// SetBuilt makes serve call f with every relay it builds, until the
// returned function is called.
func SetBuilt(f func(Daemon)) (restore func()) {
	built = f
	return func() { built = nil }
}

// Observed is what a relay has seen so far, read through its source's own
// types: the inheritance test compares it across a rebuild.
type Observed struct {
	Relayed    int64         // rows (messages) relayed
	Stalled    time.Duration // how long the stall watch has seen it stalled; 0: not stalled (watermill-forwarder has no stall watch)
	Violations int64         // the duplicate-window guard's unsafe findings
}

// Observe reads d's Observed, whichever source it relays.
func Observe(d Daemon) Observed {
	switch r := d.(type) {
	case *Relay:
		return Observed{r.Subscriber.Counters.Relayed.Load(), r.Stall.Stalled(), r.Guard.Violations.Load()}
	case walRelay:
		return Observed{r.Subscriber.Counters.Relayed.Load(), r.Stall.Stalled(), r.Guard.Violations.Load()}
	case watermillRelay:
		return Observed{r.Forwarder.Counters.Relayed.Load(), 0, r.Guard.Violations.Load()}
	}
	panic(fmt.Sprintf("no such relay: %T", d))
}

// CloseNATS closes d's NATS connection for good, as a server that drops
// the relay's credentials would: Serve builds the relay again.
func CloseNATS(d Daemon) {
	switch r := d.(type) {
	case *Relay:
		r.Conn.Close()
	case walRelay:
		r.Conn.Close()
	case watermillRelay:
		r.Conn.Close()
	}
}
