package postgreswal

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// window is the pipeline's state in stream order: the rows read from the
// slot (and found by the sweep) that are not settled yet, with the
// positions (commits, keepalives) between them. A position is confirmed
// only once every row before it is settled, so that the slot never moves
// past a row whose PubAck and mark are not in; rows are handed over in
// stream order from a cursor that a hold of the queue rewinds. It knows
// nothing of the stream, NATS or the database: the pipeline drives it, and
// window_internal_test.go checks it without a server.
type window struct {
	entries []*entry
	// head is the first live entry; next is where the search for the next
	// entry to hand over starts (head ≤ next ≤ len(entries)).
	head, next int
	// confirmed is the highest position passed: everything before it is
	// settled.
	confirmed pglogrepl.LSN
}

// compactAfter is how many popped entries the window keeps in front of
// head before it moves the live ones to the start, once they are fewer
// than the popped.
const compactAfter = 1024

// empty reports whether no entry is live.
func (w *window) empty() bool { return w.head == len(w.entries) }

// size is the number of live entries (rows and positions).
func (w *window) size() int { return len(w.entries) - w.head }

// live returns the live entries, in stream order; the slice is the
// window's own, valid until the next change.
func (w *window) live() []*entry { return w.entries[w.head:] }

// push appends e. A row that was emitted goes back to the queue: a window
// is only refilled (reset) once every outcome is in.
func (w *window) push(e *entry) {
	if e.state == emitted {
		e.state = queued
	}
	w.entries = append(w.entries, e)
}

// mark appends the position lsn (committed at at). With no live entry it
// is confirmed at once; consecutive positions collapse into the highest.
func (w *window) mark(lsn pglogrepl.LSN, at time.Time) {
	if w.empty() {
		w.confirmed = max(w.confirmed, lsn)
		return
	}
	if last := w.entries[len(w.entries)-1]; last.marker {
		last.lsn = max(last.lsn, lsn)
		return
	}
	w.entries = append(w.entries, &entry{marker: true, lsn: lsn, txTime: at})
}

// pop removes the settled rows and the positions at the head, up to the
// first row not settled: popped(e) is called for each row, passed(lsn)
// for each position, in stream order, and confirmed advances to the last
// position passed.
func (w *window) pop(popped func(e *entry), passed func(lsn pglogrepl.LSN)) {
	for !w.empty() {
		e := w.entries[w.head]
		if !e.marker && e.state != settled {
			break
		}
		if e.marker {
			w.confirmed = max(w.confirmed, e.lsn)
			passed(e.lsn)
		} else {
			popped(e)
		}
		w.entries[w.head] = nil
		w.head++
	}
	w.next = max(w.next, w.head)
	if w.head > compactAfter && w.head*2 > len(w.entries) {
		n := copy(w.entries, w.entries[w.head:])
		clear(w.entries[n:])
		w.entries = w.entries[:n]
		w.next -= w.head
		w.head = 0
	}
}

// oldest returns the commit time of the oldest live entry, or false.
func (w *window) oldest() (time.Time, bool) {
	if w.empty() {
		return time.Time{}, false
	}
	return w.entries[w.head].txTime, true
}

// cursor returns the entry at the cursor, or false past the last.
func (w *window) cursor() (*entry, bool) {
	if w.next >= len(w.entries) {
		return nil, false
	}
	return w.entries[w.next], true
}

// advance moves the cursor past the entry it is at.
func (w *window) advance() { w.next++ }

// rewind moves the cursor back to the head: after a hold of the queue the
// rows queued again are handed over anew, first the earliest.
func (w *window) rewind() { w.next = w.head }

// clear empties the window; confirmed stays.
func (w *window) clear() { w.entries, w.head, w.next = nil, 0, 0 }
