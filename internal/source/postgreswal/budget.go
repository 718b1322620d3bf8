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
