package bridge

import (
	"fmt"
	"time"

	"github.com/outbox-bridge/bridge/internal/source"
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
	case *table.GroupSource:
		s.Group.Each(func(_ string, sub *table.Subscriber) { o.Relayed += sub.Counters.Relayed.Load() })
	case *postgreswal.GroupSource:
		s.Group.Each(func(_ string, sub *postgreswal.Subscriber) { o.Relayed += sub.Counters.Relayed.Load() })
	default:
		panic(fmt.Sprintf("no such source: %T", r.Source))
	}
	return o
}

// CloseNATS closes d's NATS connection for good, as a server that drops
// the relay's credentials would: Serve builds the relay again.
func CloseNATS(d Daemon) { d.(*Relay).Conn.Close() }

// Moved sets sig on d's source, before Run, to receive a value whenever
// its rows move: a write of marks (table, postgres-wal) or a message
// settled (watermill-forwarder). One sig may watch several relays.
func Moved(d Daemon, sig *source.TestSignal[int]) {
	switch s := d.(*Relay).Source.(type) {
	case *table.Source:
		s.Subscriber.Signals.Marked = sig
	case *postgreswal.Source:
		s.Subscriber.Signals.Marked = sig
	case *watermillforwarder.Source:
		s.Forwarder.Signals.Settled = sig
	case *table.GroupSource:
		s.Group.Signals.Marked = sig
	case *postgreswal.GroupSource:
		s.Group.Signals.Marked = sig
	default:
		panic(fmt.Sprintf("no such source: %T", s))
	}
}

// TableSignals are the signals of d's table source (source: table).
func TableSignals(d Daemon) *table.Signals {
	return &d.(*Relay).Source.(*table.Source).Subscriber.Signals
}
