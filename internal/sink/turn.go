package sink

import (
	"context"
	"sync"
)

// Turn orders the hand-over of messages to the NATS client when they are
// published from several goroutines at once (a Watermill router runs every
// message's handler in a goroutine of its own): a message whose context
// carries a Turn (WithTurn) is handed to the client only after the message
// of the previous Turn was, or was given up. One connection delivers what
// it is handed in order, so a stream stores such messages in turn order,
// while their PubAcks are still awaited concurrently.
//
// A source that must publish in a given order (the postgres-wal source:
// commit order) chains a Turn per message with NewTurn(previous) and calls
// Pass when it learns the message's outcome, so that a message that never
// reached PublishMsg (refused before, or nacked by a handler that failed
// first) does not hold up the ones after it. Pass is idempotent.
type Turn struct {
	prev <-chan struct{}
	done chan struct{}
	once sync.Once
}

// NewTurn returns the turn that follows prev (nil: the first of a chain).
func NewTurn(prev *Turn) *Turn {
	t := &Turn{done: make(chan struct{})}
	if prev != nil {
		t.prev = prev.done
	}
	return t
}

// Pass lets the next turn go once this one's predecessors have gone: a
// turn given up early (its message never published) still keeps the
// order of those around it. Idempotent; safe for concurrent use.
func (t *Turn) Pass() {
	t.once.Do(func() {
		if t.prev == nil {
			close(t.done)
			return
		}
		select {
		case <-t.prev:
			close(t.done)
			return
		default:
		}
		go func() {
			<-t.prev
			close(t.done)
		}()
	})
}

// Passed is closed once this turn and every turn before it passed.
func (t *Turn) Passed() <-chan struct{} { return t.done }

// wait returns when the previous turn passed or ctx ended.
func (t *Turn) wait(ctx context.Context) {
	if t.prev == nil {
		return
	}
	select {
	case <-t.prev:
	case <-ctx.Done():
	}
}

type turnKey struct{}

// WithTurn returns ctx carrying t; give it to the message (SetContext)
// that PublishMsg will be called with.
func WithTurn(ctx context.Context, t *Turn) context.Context {
	return context.WithValue(ctx, turnKey{}, t)
}

func turnFrom(ctx context.Context) *Turn {
	t, _ := ctx.Value(turnKey{}).(*Turn)
	return t
}
