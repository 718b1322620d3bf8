package table

import (
	"sync"
	"time"

	"github.com/outbox-bridge/bridge/internal/source"
)

// RescueSignal enables the signal of sub's rescuer: the rows each run of
// in-flight recovery moved. Call it before Subscribe.
func RescueSignal(sub *Subscriber) *source.TestSignal[int] {
	sub.rescuer.rescued.Enable()
	return &sub.rescuer.rescued
}

// ClaimSignal enables the signal of sub's claims: the rows each claim
// took. Call it before Subscribe.
func ClaimSignal(sub *Subscriber) *source.TestSignal[int] {
	sub.claimer.claimed.Enable()
	return &sub.claimer.claimed
}

// MarkSignal enables the signal of sub's completer: the settlements each
// write of marks took. Call it before Subscribe; read it with Marks.
func MarkSignal(sub *Subscriber) *source.TestSignal[int] {
	sub.marked.Enable()
	return &sub.marked
}

// Marks is sub's mark signal, enabled by MarkSignal.
func Marks(sub *Subscriber) *source.TestSignal[int] { return &sub.marked }

// RetentionSignal enables the signal of sub's retention (SubscriberConfig.Retention
// set): the rows each run deleted. Call it before Subscribe.
func RetentionSignal(sub *Subscriber) *source.TestSignal[int] {
	for _, m := range sub.maintenance {
		if r, ok := m.(*source.Retention); ok {
			r.Purged.Enable()
			return &r.Purged
		}
	}
	panic("no retention: SubscriberConfig.Retention is not set")
}

// DrainSignal enables the signal of sub's drain: it began. Call it before
// Subscribe.
func DrainSignal(sub *Subscriber) *source.TestSignal[struct{}] {
	sub.draining.Enable()
	return &sub.draining
}

// ManualDrain makes sub's drain give up when expire is called instead of
// after DrainTimeout. Call it before Subscribe.
func ManualDrain(sub *Subscriber) (expire func()) {
	ch := make(chan time.Time)
	sub.drainExpiry = ch
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}
