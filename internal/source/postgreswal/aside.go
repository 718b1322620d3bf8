package postgreswal

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Rows set aside.
//
// A row that cannot be published for reasons of its own — a nack: no
// stream captures its subject, its stream refuses it (full with
// discard-new, a per-subject limit, a wrong expected sequence), the
// duplicate-window guard finds its stream unsafe — does not hold the rows
// after it in commit order. It is set aside: marked failed in the table
// with its error, attempts and backoff (and its first publish, for the
// reconcile), and it leaves the window once that mark is written, so the
// slot's position passes it and every other row goes on. The sweep brings
// it back when its backoff ends (sweepNow), as it brings any pending row
// the slot will not deliver; after relay.max_attempts it is a dead letter.
//
// Per-key order: while a row of an ordering key is set aside, the rows of
// that key read after it (a higher id) are set aside too, waiting for it,
// without an attempt charged; they come back with it, by the sweep, in id
// order. A row of a key that comes back (a probe) is handed over alone:
// the rows after it in the window wait for its outcome (one round trip;
// the window is handed over in order, so the rows of other keys wait
// too), so a second failure cannot let a later row of the key be stored
// ahead of it. The rows that
// waited for it come back as they were read: once it is relayed they
// follow it as any rows of a key do.
//
// A whole-destination outage (NATS down, a stream without a leader or
// quorum, publishes not answered) is not a row's own fault: it still holds
// the queue, uncharged (pipeline.hold).

// asideRow is one row set aside and not in the window.
type asideRow struct {
	key    string    // its ordering key; "" for none
	reason string    // why: its error, or the row of its key it waits for
	waits  bool      // set aside for an earlier row of its key, not for a failure of its own
	due    time.Time // when its backoff ends (relay clock)
	// marked: its failed mark is written (or it was read failed from the
	// table): the sweep's check of whether it is still failed applies.
	marked bool
}

// asides is what the pipeline knows of the rows set aside. Owned by the
// pipeline's goroutine.
type asides struct {
	rows  map[int64]*asideRow
	byKey map[string][]int64 // the ids of each ordering key's rows, sorted
	// probing is, by ordering key, the row of the key that came back from
	// being set aside and is handed over, awaiting its outcome.
	probing map[string]int64
	// failed and waiting count the rows; latest is the failed one set
	// aside last (0 once it came back), for /readyz to name.
	failed, waiting int
	latest          int64
	// firstDue caches the first backoff end of the rows whose mark is
	// written; stale: to compute again (a row came, left or was marked).
	firstDue time.Time
	stale    bool
}

func newAsides() *asides {
	return &asides{rows: map[int64]*asideRow{}, byKey: map[string][]int64{}, probing: map[string]int64{}}
}

// add records row id of key set aside.
func (a *asides) add(id int64, r *asideRow) {
	a.take(id)
	a.rows[id] = r
	a.stale = true
	if r.waits {
		a.waiting++
	} else {
		a.failed++
		a.latest = id
	}
	if r.key == "" {
		return
	}
	ids := a.byKey[r.key]
	i, _ := slices.BinarySearch(ids, id)
	a.byKey[r.key] = slices.Insert(ids, i, id)
}

// take removes id (it is in the window again, or settled elsewhere) and
// returns what it was set aside as; nil when it was not.
func (a *asides) take(id int64) *asideRow {
	r, ok := a.rows[id]
	if !ok {
		return nil
	}
	delete(a.rows, id)
	a.stale = true
	if r.waits {
		a.waiting--
	} else {
		a.failed--
	}
	if a.latest == id {
		a.latest = 0
	}
	if ids := a.byKey[r.key]; ids != nil {
		if i, found := slices.BinarySearch(ids, id); found {
			ids = slices.Delete(ids, i, i+1)
		}
		if len(ids) == 0 {
			delete(a.byKey, r.key)
		} else {
			a.byKey[r.key] = ids
		}
	}
	return r
}

// before returns the first row of key set aside with an id below id (the
// row it waits for), or 0.
func (a *asides) before(key string, id int64) int64 {
	if ids := a.byKey[key]; len(ids) > 0 && ids[0] < id {
		return ids[0]
	}
	return 0
}

// release makes the rows of key that wait for an earlier row due now (the
// row they waited for is settled elsewhere: deleted, relayed by another
// relay) and returns their ids, for the sweep to make them available.
func (a *asides) release(key string) []int64 {
	var ids []int64
	now := time.Now()
	for _, id := range a.byKey[key] {
		if r := a.rows[id]; r.waits {
			r.due = now
			ids = append(ids, id)
		}
	}
	a.stale = a.stale || len(ids) > 0
	return ids
}

// markedNow records that id's failed mark is written.
func (a *asides) markedNow(id int64) {
	if r := a.rows[id]; r != nil {
		r.marked, a.stale = true, true
	}
}

// marked returns the ids whose failed mark is written, for the sweep to
// check against the table.
func (a *asides) marked() []int64 {
	var ids []int64
	for id, r := range a.rows {
		if r.marked {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// sweepAgain is the least time between two sweeps the pipeline asks for
// (sweepNow): a row set aside whose backoff ended and that a sweep did not
// bring back yet (its mark's available_at, on the database's clock, was
// not reached yet) is asked for again after it.
const sweepAgain = time.Second

// nextSweep returns when to ask for a sweep: when the first backoff of a
// row set aside whose mark is written ends, and at least sweepAgain after
// asked, the last time one was asked for; zero when no row waits.
func (a *asides) nextSweep(asked time.Time) time.Time {
	if a.stale {
		a.firstDue, a.stale = time.Time{}, false
		for _, r := range a.rows {
			if r.marked && (a.firstDue.IsZero() || r.due.Before(a.firstDue)) {
				a.firstDue = r.due
			}
		}
	}
	first := a.firstDue
	if first.IsZero() || asked.IsZero() {
		return first
	}
	return maxTime(first, asked.Add(sweepAgain))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// summary is what /readyz and the metrics say of the rows set aside.
func (a *asides) summary() *asideSummary {
	if len(a.rows) == 0 {
		return nil
	}
	sum := &asideSummary{failed: a.failed, waiting: a.waiting, latest: a.latest}
	if r := a.rows[a.latest]; r != nil {
		sum.reason = r.reason
	}
	return sum
}

// asideSummary: failed rows set aside for failures of their own, waiting
// rows of their ordering keys, and the failed one set aside last with its
// reason.
type asideSummary struct {
	failed, waiting int
	latest          int64
	reason          string
}

// asideCount is sum's waiting rows, or its failed ones.
func asideCount(sum *asideSummary, waiting bool) int {
	switch {
	case sum == nil:
		return 0
	case waiting:
		return sum.waiting
	}
	return sum.failed
}

// setAsideReady is the readiness text of the rows set aside, "" for none.
func setAsideReady(sum *asideSummary) string {
	if sum == nil {
		return ""
	}
	text := fmt.Sprintf("%d rows set aside: failed for reasons of their own, marked failed and retried by the sweep after their backoff, the rows after them going on", sum.failed)
	if sum.latest != 0 {
		text += fmt.Sprintf(" (latest: row %d: %s)", sum.latest, sum.reason)
	}
	if sum.waiting > 0 {
		text += fmt.Sprintf("; %d rows of their ordering keys wait for them", sum.waiting)
	}
	return text + "; see bridge status"
}

// loadAsides reads the rows of an ordering key that the table holds as
// failed: rows set aside by an earlier run, whose slot position may be
// confirmed already. Until they are relayed, the rows of their keys read
// from the slot wait for them.
func (s *Subscriber) loadAsides(ctx context.Context) (*asides, error) {
	rows, err := s.db.SQL.QueryContext(ctx, s.q.Asides)
	if err != nil {
		return nil, fmt.Errorf("read the failed rows of ordering keys: %w", err)
	}
	defer rows.Close()
	a := newAsides()
	for rows.Next() {
		var id int64
		var in float64 // seconds until its backoff ends
		r := &asideRow{marked: true}
		if err := rows.Scan(&id, &r.key, &r.reason, &in); err != nil {
			return nil, fmt.Errorf("read the failed rows of ordering keys: %w", err)
		}
		r.due = time.Now().Add(time.Duration(in * float64(time.Second)))
		// A row set aside for an earlier row of its key says so
		// (waitAside): it waits again, and is released with its key.
		r.waits = strings.HasPrefix(r.reason, waitsPrefix)
		a.add(id, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the failed rows of ordering keys: %w", err)
	}
	return a, nil
}

// asideState is read by Ready and the metrics while the pipeline runs.
type asideState = atomic.Pointer[asideSummary]
