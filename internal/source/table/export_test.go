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
