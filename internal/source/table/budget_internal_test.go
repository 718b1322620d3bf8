package table

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBudgetSharesBetweenTablesWithWork: a table alone may take the whole
// budget; once another table holds rows, each may hold its share and no
// more (the budget over the tables holding rows, counting the one that
// asks, or one batch when that is more), so that one table's backlog, huge rows or stuck rows leave the
// others room; a table refused room is woken by the next settlement of
// any table; a table holding nothing always gets at least one row.
func TestBudgetSharesBetweenTablesWithWork(t *testing.T) {
	b := NewBudget(2000, 1000)
	member := func() *Subscriber {
		s := &Subscriber{wake: make(chan struct{}, 1), cfg: SubscriberConfig{BatchSize: 100}, claimer: &claimer{}}
		b.join(s)
		return s
	}
	big, small := member(), member()

	rows, bytes := b.room(big)
	require.Equal(t, 2000, rows, "alone with work: the whole budget")
	require.EqualValues(t, 1000, bytes)

	big.outstanding.Store(1500)
	big.outstandingBytes.Store(999)
	rows, bytes = b.room(small)
	require.Equal(t, 500, rows, "what the big table left of the budget")
	require.EqualValues(t, 1, bytes, "a table holding nothing takes at least one row, whatever the bytes held by others")

	small.outstanding.Store(10)
	small.outstandingBytes.Store(1)
	rows, _ = b.room(big)
	require.LessOrEqual(t, rows, 0, "over its share (1000 of 2000 with two tables holding rows)")
	select {
	case <-big.wake:
		t.Fatal("woken before any settlement")
	default:
	}
	b.freed()
	select {
	case <-big.wake:
	default:
		t.Fatal("a table refused room is woken by the next settlement")
	}
	rows, _ = b.room(small)
	require.Equal(t, 490, rows, "the small table's share less what it holds, within what the budget has left")

	// 200 tables with work: a share of 10 rows each, or a batch when
	// that is more.
	many := NewBudget(2000, 1<<20)
	var subs []*Subscriber
	for range 200 {
		s := &Subscriber{wake: make(chan struct{}, 1), cfg: SubscriberConfig{BatchSize: 5}, claimer: &claimer{}}
		s.outstanding.Store(1)
		many.join(s)
		subs = append(subs, s)
	}
	rows, _ = many.room(subs[0])
	require.Equal(t, 9, rows)
	many.leave(subs[0])
	rows, _ = many.room(subs[1])
	require.Equal(t, 9, rows, "2000/199 = 10, less the one held")
	subs[2].cfg.BatchSize = 50
	rows, _ = many.room(subs[2])
	require.Equal(t, 49, rows, "a batch of 50, more than the share, less the one held")

	// A table that claimed a moment ago counts as one with work although
	// it holds nothing now (its rows settled at once).
	recent := NewBudget(2000, 1<<20)
	busy := &Subscriber{wake: make(chan struct{}, 1), cfg: SubscriberConfig{BatchSize: 100}, claimer: &claimer{}}
	steady := &Subscriber{wake: make(chan struct{}, 1), cfg: SubscriberConfig{BatchSize: 100}, claimer: &claimer{}}
	recent.join(busy)
	recent.join(steady)
	rows, _ = recent.room(busy)
	require.Equal(t, 2000, rows, "the other table never claimed")
	steady.claimer.lastClaim.Store(time.Now().UnixNano())
	rows, _ = recent.room(busy)
	require.Equal(t, 1000, rows, "the other table claimed within activeWindow")
	steady.claimer.lastClaim.Store(time.Now().Add(-2 * activeWindow).UnixNano())
	rows, _ = recent.room(busy)
	require.Equal(t, 2000, rows, "the other table's last claim is older than activeWindow")
}
