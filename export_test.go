package bridge

import (
	"fmt"
	"time"

	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
	"github.com/outbox-bridge/bridge/internal/source/table"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder"
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
	r := d.(*Relay)
	o := Observed{Violations: r.Guard.Violations.Load()}
	switch s := r.Source.(type) {
	case *table.Source:
		o.Relayed, o.Stalled = s.Subscriber.Counters.Relayed.Load(), s.Stall.Stalled()
	case *postgreswal.Source:
		o.Relayed, o.Stalled = s.Subscriber.Counters.Relayed.Load(), s.Stall.Stalled()
	case *watermillforwarder.Source:
		o.Relayed = s.Forwarder.Counters.Relayed.Load()
	default:
		panic(fmt.Sprintf("no such source: %T", r.Source))
	}
	return o
}

// CloseNATS closes d's NATS connection for good, as a server that drops
// the relay's credentials would: Serve builds the relay again.
func CloseNATS(d Daemon) { d.(*Relay).Conn.Close() }
