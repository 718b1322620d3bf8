package postgreswal

import "sync"

// budget bounds what the subscriber holds of the rows it read (from the
// slot, or by the sweep) and has not settled: their number (MaxInFlight)
// and the bytes of their payloads and headers (MaxInFlightBytes). The
// reader takes a row's share before it hands the row to the pipeline, and
// waits while the row does not fit; the pipeline gives the share back as
// the row no longer needs its payload (PubAck, dead letter) and once it is
// settled. A row always fits an empty budget, so that a row larger than
// the bound is relayed too: what is held passes the bound by at most one
// row.
type budget struct {
	maxRows, maxBytes int64

	mu          sync.Mutex
	rows, bytes int64
	// swept is set while swept rows wait for room: the reader waits
	// behind them, so that a busy slot does not keep them out for ever.
	swept bool
	freed chan struct{} // holds one token after room was given back
}

func newBudget(maxRows, maxBytes int64) *budget {
	return &budget{maxRows: maxRows, maxBytes: maxBytes, freed: make(chan struct{}, 1)}
}

// take takes room for one row of size bytes and reports whether it did:
// when the row fits both bounds, or nothing is held. The reader's takes
// fail while swept rows wait (sweep false).
func (b *budget) take(size int64, sweep bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.swept && !sweep {
		return false
	}
	if b.rows > 0 && (b.rows+1 > b.maxRows || b.bytes+size > b.maxBytes) {
		return false
	}
	b.rows++
	b.bytes += size
	return true
}

// setSwept(true) makes the reader's takes fail until setSwept(false):
// swept rows wait for room.
func (b *budget) setSwept(waiting bool) {
	b.mu.Lock()
	b.swept = waiting
	b.mu.Unlock()
	if !waiting {
		b.signal()
	}
}

// give gives back room for rows rows and bytes bytes.
func (b *budget) give(rows, bytes int64) {
	if rows == 0 && bytes == 0 {
		return
	}
	b.mu.Lock()
	b.rows -= rows
	b.bytes -= bytes
	b.mu.Unlock()
	b.signal()
}

func (b *budget) signal() {
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// held returns the rows and bytes held.
func (b *budget) held() (rows, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rows, b.bytes
}

// account is one subscriber's part of its stream's budget: what the
// reader took for the rows it handed that subscriber, and the swept rows
// the subscriber took itself. When the subscriber stops (a table let go,
// or the relay stopping), close gives back all it still holds: rows in its
// window, in batches it never took, in a sweep waiting for room. A table
// let go would otherwise keep its part for good, and the reader, waiting
// for room, would stop reading the slot for every other table.
type account struct {
	b *budget

	mu          sync.Mutex
	rows, bytes int64
	closed      bool
	sweeping    bool // it set the budget's swept
}

func newAccount(b *budget) *account { return &account{b: b} }

// charge records that the reader took room for a row of size bytes for
// this subscriber; false (the room given back) once it closed.
func (a *account) charge(size int64) bool {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		a.b.give(1, size)
		return false
	}
	a.rows++
	a.bytes += size
	a.mu.Unlock()
	return true
}

// take takes room for a swept row of size bytes (budget.take with sweep).
func (a *account) take(size int64, sweep bool) bool {
	if !a.b.take(size, sweep) {
		return false
	}
	return a.charge(size)
}

// setSwept is the budget's setSwept, remembered for close.
func (a *account) setSwept(waiting bool) {
	a.mu.Lock()
	a.sweeping = waiting
	a.mu.Unlock()
	a.b.setSwept(waiting)
}

// give gives back room for rows rows and bytes bytes of this subscriber's;
// nothing once it closed (close gave back all).
func (a *account) give(rows, bytes int64) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.rows -= rows
	a.bytes -= bytes
	a.mu.Unlock()
	a.b.give(rows, bytes)
}

// held returns the rows and bytes this subscriber holds.
func (a *account) held() (rows, bytes int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rows, a.bytes
}

// close gives back all the subscriber holds, and lets the reader's takes
// succeed again if its swept rows were waiting for room. Idempotent.
func (a *account) close() {
	a.mu.Lock()
	rows, bytes, sweeping := a.rows, a.bytes, a.sweeping
	a.rows, a.bytes, a.sweeping, a.closed = 0, 0, false, true
	a.mu.Unlock()
	a.b.give(rows, bytes)
	if sweeping {
		a.b.setSwept(false)
	}
}
