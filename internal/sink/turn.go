package sink

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// ErrTurnBroken is returned by PublishMsg for a message whose turn comes
// after a message that was not handed to the NATS client (refused before,
// past its publish deadline, or failed to send): handing it over would
// store it before that earlier message. Nothing was sent; the caller
// publishes both again, in order.
var ErrTurnBroken = errors.New("not published: an earlier message of its turn chain was not sent")

// Turn orders the hand-over of messages to the NATS client when they are
// published from several goroutines at once (a Watermill router runs every
// message's handler in a goroutine of its own): a message whose context
// carries a Turn (WithTurn) is handed to the client only after the message
// of the previous Turn was, while their PubAcks are still awaited
// concurrently. One connection delivers what it is handed in order, so a
// stream stores such messages in turn order.
//
// When a message of the chain is not handed over (its turn passes with
// sent false), every later message of the chain is refused with
// ErrTurnBroken instead of sent: what reaches the client is always a
// prefix of the chain, never a chain with a hole that a later publish
// would fill out of order. The source then starts a new chain.
//
// A source that must publish in a given order (the postgres-wal source:
// commit order) chains a Turn per message with NewTurn(previous) and calls
// Pass when it learns the message's outcome, so that a message that never
// reached PublishMsg (nacked by a handler that failed first) does not hold
// up the ones after it. Pass is idempotent: the first call counts.
type Turn struct {
	prevDone   <-chan struct{}
	prevBroken *atomic.Bool
	done       chan struct{}
	broken     *atomic.Bool // set before done is closed
	once       sync.Once
}

// NewTurn returns the turn that follows prev (nil: the first of a chain).
// A turn holds only its predecessor's signals, not the predecessor: a long
// chain is not kept in memory.
func NewTurn(prev *Turn) *Turn {
	t := &Turn{done: make(chan struct{}), broken: new(atomic.Bool)}
	if prev != nil {
		t.prevDone, t.prevBroken = prev.done, prev.broken
	}
	return t
}

// Pass lets the next turn go once this one's predecessors have gone; sent
// says whether this turn's message was handed to the client. Idempotent;
// safe for concurrent use.
func (t *Turn) Pass(sent bool) {
	t.once.Do(func() {
		finish := func() {
			t.broken.Store(!sent || (t.prevBroken != nil && t.prevBroken.Load()))
			close(t.done)
		}
		if t.prevDone == nil {
			finish()
			return
		}
		select {
		case <-t.prevDone:
			finish()
			return
		default:
		}
		go func() {
			<-t.prevDone
			finish()
		}()
	})
}

// Passed is closed once this turn and every turn before it passed.
func (t *Turn) Passed() <-chan struct{} { return t.done }

// Broken reports, once Passed is closed, whether this turn's message or an
// earlier one of the chain was not handed over.
func (t *Turn) Broken() bool { return t.broken.Load() }

// wait returns when the previous turn passed, and whether the message may
// be handed over: false when an earlier message was not, or ctx ended
// first.
func (t *Turn) wait(ctx context.Context) bool {
	if t.prevDone == nil {
		return true
	}
	select {
	case <-t.prevDone:
		return !t.prevBroken.Load()
	case <-ctx.Done():
		return false
	}
}

type turnKey struct{}

// WithTurn returns ctx carrying t; give it to the message (SetContext)
// that PublishMsg will be called with.
func WithTurn(ctx context.Context, t *Turn) context.Context {
	return context.WithValue(ctx, turnKey{}, t)
}

// Skip passes the turn ctx carries, if any, as not sent: for a message
// given up before Send (Batch.Send passes its turn by itself).
func Skip(ctx context.Context) {
	if t := turnFrom(ctx); t != nil {
		t.Pass(false)
	}
}

func turnFrom(ctx context.Context) *Turn {
	t, _ := ctx.Value(turnKey{}).(*Turn)
	return t
}
