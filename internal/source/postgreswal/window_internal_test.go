package postgreswal

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// row returns a queued row entry of id, read in the transaction that
// commits at lsn.
func row(id int64, lsn pglogrepl.LSN) *entry {
	return &entry{row: outbox.Row{ID: id}, txLSN: lsn, txTime: time.Unix(int64(lsn), 0)}
}

// popAll pops w, returning the ids of the rows and the positions passed,
// in the order pop reported them.
func popAll(w *window) (rows []int64, positions []pglogrepl.LSN) {
	w.pop(func(e *entry) { rows = append(rows, e.row.ID) }, func(lsn pglogrepl.LSN) { positions = append(positions, lsn) })
	return rows, positions
}

// TestWindowConfirmsOnlyPastSettledRows: a position is confirmed once
// every row before it is settled — not before, whatever is settled after
// it — and rows leave the window in stream order.
func TestWindowConfirmsOnlyPastSettledRows(t *testing.T) {
	var w window
	a, b, c := row(1, 100), row(2, 100), row(3, 200)
	w.push(a)
	w.push(b)
	w.mark(100, time.Unix(100, 0))
	w.push(c)
	w.mark(200, time.Unix(200, 0))

	c.state = settled // a later row settled first: nothing moves
	rows, positions := popAll(&w)
	require.Empty(t, rows)
	require.Empty(t, positions)
	require.Zero(t, w.confirmed, "row 1 is not settled: no position is confirmed")

	b.state = settled
	rows, _ = popAll(&w)
	require.Empty(t, rows, "row 1 still holds rows 2 and 3")
	require.Zero(t, w.confirmed)

	a.state = settled
	rows, positions = popAll(&w)
	require.Equal(t, []int64{1, 2, 3}, rows, "rows leave in stream order")
	require.Equal(t, []pglogrepl.LSN{100, 200}, positions, "positions pass in stream order")
	require.Equal(t, pglogrepl.LSN(200), w.confirmed)
	require.True(t, w.empty())
}

// TestWindowStopsAtEveryUnsettledState: a row emitted, acked (its mark
// not written), dead (its dead-letter mark not written), being checked or
// set aside holds every position after it; only settled lets it pass.
func TestWindowStopsAtEveryUnsettledState(t *testing.T) {
	for _, state := range []entryState{queued, emitted, acked, dead, checking, aside} {
		var w window
		e := row(1, 100)
		e.state = state
		w.push(e)
		w.mark(100, time.Time{})
		rows, positions := popAll(&w)
		require.Empty(t, rows, "state %d", state)
		require.Empty(t, positions, "state %d", state)
		require.Zero(t, w.confirmed, "state %d", state)
	}
}

// TestWindowPositions: with no live entry a position is confirmed at once;
// consecutive positions collapse into the highest; a position never moves
// the confirmed one back.
func TestWindowPositions(t *testing.T) {
	var w window
	w.mark(50, time.Time{})
	require.Equal(t, pglogrepl.LSN(50), w.confirmed, "empty window: confirmed at once")
	require.True(t, w.empty())

	e := row(1, 60)
	w.push(e)
	w.mark(60, time.Time{})
	w.mark(70, time.Time{})
	w.mark(65, time.Time{})
	require.Equal(t, 2, w.size(), "the row and one position: consecutive positions collapse")
	e.state = settled
	_, positions := popAll(&w)
	require.Equal(t, []pglogrepl.LSN{70}, positions, "the highest of the collapsed positions")

	w.mark(40, time.Time{})
	require.Equal(t, pglogrepl.LSN(70), w.confirmed, "an older position does not move it back")
}

// TestWindowCursorAndHolds: the cursor hands over entries in stream order;
// a hold of the queue rewinds it to the head, so that rows queued again
// after a failure are handed over anew, the earliest first, before the
// rows after them; the cursor never points before the head.
func TestWindowCursorAndHolds(t *testing.T) {
	var w window
	for id := int64(1); id <= 3; id++ {
		w.push(row(id, pglogrepl.LSN(id*10)))
	}
	var handed []int64
	for e, ok := w.cursor(); ok; e, ok = w.cursor() {
		handed = append(handed, e.row.ID)
		e.state = emitted
		w.advance()
	}
	require.Equal(t, []int64{1, 2, 3}, handed)

	// Row 1 is published; rows 2 and 3 fail (NATS away): queued again, held.
	live := w.live()
	live[0].state = settled
	live[1].state, live[2].state = queued, queued
	popAll(&w)
	w.rewind()
	e, ok := w.cursor()
	require.True(t, ok)
	require.Equal(t, int64(2), e.row.ID, "after the hold, the earliest failed row is first again")

	// A pop past the cursor moves it up to the head.
	e.state = settled
	popAll(&w)
	e, ok = w.cursor()
	require.True(t, ok)
	require.Equal(t, int64(3), e.row.ID)
}

// TestWindowPushRequeuesEmitted: a row pushed back into a window (a reset
// after a stream restart) waits to be handed over again, never as
// emitted: its outcome was taken before the reset.
func TestWindowPushRequeuesEmitted(t *testing.T) {
	var w window
	e := row(1, 10)
	e.state = emitted
	w.push(e)
	require.Equal(t, queued, e.state)
	w.clear()
	require.True(t, w.empty())
	_, ok := w.cursor()
	require.False(t, ok)
}

// TestWindowCompactsInOrder: after many entries popped, the live ones move
// to the start of the slice with their order, the cursor and the oldest
// commit time kept.
func TestWindowCompactsInOrder(t *testing.T) {
	var w window
	const n = 3 * compactAfter
	for id := int64(1); id <= n; id++ {
		w.push(row(id, pglogrepl.LSN(id)))
		w.mark(pglogrepl.LSN(id), time.Time{})
	}
	live := w.live()
	for _, e := range live[:len(live)*3/4] {
		if !e.marker {
			e.state = settled
		}
	}
	for range len(live)*3/4 + 10 { // the cursor ahead of the new head
		w.advance()
	}
	cursorBefore, _ := w.cursor()
	popAll(&w)
	require.Zero(t, w.head, "compacted")
	cursorAfter, ok := w.cursor()
	require.True(t, ok)
	require.Same(t, cursorBefore, cursorAfter, "the cursor points at the same entry")
	first := w.live()[0]
	require.False(t, first.marker)
	at, ok := w.oldest()
	require.True(t, ok)
	require.Equal(t, first.txTime, at)
	var prev int64
	for _, e := range w.live() {
		if !e.marker {
			require.Greater(t, e.row.ID, prev, "order kept")
			prev = e.row.ID
		}
	}
	require.Equal(t, pglogrepl.LSN(first.row.ID-1), w.confirmed, "confirmed up to the row before the first live one")
}
