package table

import (
	"sync"
	"time"

	"github.com/outbox-bridge/bridge/internal/source"
)

// RescueSignal sets sub.Signals.Rescued. Call it before Subscribe.
func RescueSignal(sub *Subscriber) *source.TestSignal[int] {
	sub.Signals.Rescued = source.NewTestSignal[int]()
	return sub.Signals.Rescued
}

// ClaimSignal sets sub.Signals.Claimed. Call it before Subscribe.
func ClaimSignal(sub *Subscriber) *source.TestSignal[int] {
	sub.Signals.Claimed = source.NewTestSignal[int]()
	return sub.Signals.Claimed
}

// MarkSignal sets sub.Signals.Marked. Call it before Subscribe.
func MarkSignal(sub *Subscriber) *source.TestSignal[int] {
	sub.Signals.Marked = source.NewTestSignal[int]()
	return sub.Signals.Marked
}

// Marks is sub.Signals.Marked, set by MarkSignal.
func Marks(sub *Subscriber) *source.TestSignal[int] { return sub.Signals.Marked }

// RetentionSignal sets sub.Signals.Purged. Call it before Subscribe.
func RetentionSignal(sub *Subscriber) *source.TestSignal[int] {
	sub.Signals.Purged = source.NewTestSignal[int]()
	return sub.Signals.Purged
}

// DrainSignal sets sub.Signals.Draining. Call it before Subscribe.
func DrainSignal(sub *Subscriber) *source.TestSignal[struct{}] {
	sub.Signals.Draining = source.NewTestSignal[struct{}]()
	return sub.Signals.Draining
}

// ManualDrain makes sub's drain give up when expire is called instead of
// after DrainTimeout. Call it before Subscribe.
func ManualDrain(sub *Subscriber) (expire func()) {
	ch := make(chan time.Time)
	sub.drainExpiry = ch
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}
