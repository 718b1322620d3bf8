package postgreswal

import "sync"

// queue is an unbounded FIFO between two goroutines: push never blocks
// (so the pipeline and the marker, which feed each other, cannot deadlock)
// and ready signals that items wait.
type queue[T any] struct {
	mu     sync.Mutex
	items  []T
	closed bool
	ready  chan struct{} // holds one token while items wait or once closed
}

func newQueue[T any]() *queue[T] { return &queue[T]{ready: make(chan struct{}, 1)} }

func (q *queue[T]) push(items ...T) {
	if len(items) == 0 {
		return
	}
	q.mu.Lock()
	q.items = append(q.items, items...)
	q.mu.Unlock()
	q.signal()
}

func (q *queue[T]) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take returns every waiting item, without blocking.
func (q *queue[T]) take() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// wait blocks until items wait or the queue is closed, and returns them;
// ok is false once it is closed and empty.
func (q *queue[T]) wait() (items []T, ok bool) {
	for {
		q.mu.Lock()
		items, closed := q.items, q.closed
		q.items = nil
		q.mu.Unlock()
		if len(items) > 0 {
			return items, true
		}
		if closed {
			return nil, false
		}
		<-q.ready
	}
}

func (q *queue[T]) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}
