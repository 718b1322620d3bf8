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

// TestBudgetWeighsBacklogs: among the tables with a backlog (their last
// claim full), the row shares are weighted by the backlogs counted: their
// equal shares together, split in proportion, the floor of one batch taken
// from the bigger tables' parts and not from the tables without a
// backlog, which keep their equal share; bytes are shared equally, however
// large the byte budget; until every backlogged table is counted, the
// shares are equal. Weigh counts only while the weights can matter: two
// backlogged tables or more, and their equal shares more than a batch
// each.
func TestBudgetWeighsBacklogs(t *testing.T) {
	b := NewBudget(3000, 3<<20)
	member := func(b *Budget, batch int, backlog int64) *Subscriber {
		s := &Subscriber{wake: make(chan struct{}, 1), cfg: SubscriberConfig{BatchSize: batch}, claimer: &claimer{}}
		s.claimer.lastClaim.Store(time.Now().UnixNano())
		s.claimer.backlog.Store(backlog)
		b.join(s)
		return s
	}
	big, small, light := member(b, 100, 9000), member(b, 100, -1), member(b, 100, 0)

	rows, bytes := b.room(big)
	require.Equal(t, 1000, rows, "the small table's backlog is not counted yet: equal shares")
	require.EqualValues(t, 1<<20, bytes)
	require.Len(t, b.weighable(), 2)

	small.claimer.setBacklog(1000)
	rows, bytes = b.room(big)
	require.Equal(t, 1800, rows, "two equal shares (2000), 9,000 of 10,000 rows waiting")
	require.EqualValues(t, 1<<20, bytes, "bytes are shared equally")
	rows, _ = b.room(small)
	require.Equal(t, 200, rows, "2000 × 1,000 / 10,000")
	rows, _ = b.room(light)
	require.Equal(t, 1000, rows, "a table without a backlog keeps its equal share")

	small.claimer.setBacklog(10)
	rows, _ = b.room(small)
	require.Equal(t, 100, rows, "the floor of one batch")
	rows, _ = b.room(big)
	require.Equal(t, 1900, rows, "the floor comes out of the bigger table's part")

	small.claimer.backlog.Store(0) // its claim was not full
	small.claimer.setBacklog(500)
	require.Zero(t, small.claimer.backlog.Load(), "a count that lands after the claims stopped being full is dropped")
	rows, _ = b.room(big)
	require.Equal(t, 1000, rows, "one backlogged table: equal shares")

	light.claimer.backlog.Store(-1)
	small.claimer.backlog.Store(-1)
	small.claimer.setBacklog(1000)
	rows, _ = b.room(big)
	require.Equal(t, 1000, rows, "a table newly backlogged, not counted yet: equal shares")
	b.leave(light)
	b.leave(small)
	rows, _ = b.room(big)
	require.Equal(t, 3000, rows, "alone with work, weights do not matter")
	require.Empty(t, b.weighable(), "one backlogged table: nothing to weigh")

	// Floors never eat into the shares of the tables without a backlog:
	// backlogs of 10,000, 10 and 10 and a table without one, batches of
	// 500, 4000 rows: equal shares of 1000, a pool of 3000 for the three.
	floors := NewBudget(4000, 1<<20)
	huge, tiny1, tiny2, steady := member(floors, 500, 10000), member(floors, 500, 10), member(floors, 500, 10), member(floors, 500, 0)
	rows, _ = floors.room(huge)
	require.Equal(t, 2000, rows, "the pool less the two floors")
	huge.outstanding.Store(2000)
	tiny1.outstanding.Store(500)
	tiny2.outstanding.Store(500)
	rows, _ = floors.room(steady)
	require.Equal(t, 1000, rows, "the table without a backlog still has its equal share")

	tight := NewBudget(1000, 1<<20)
	member(tight, 500, -1)
	member(tight, 500, -1)
	require.Empty(t, tight.weighable(), "a batch each is the whole budget: every share is one batch whatever the weights")

	// A byte budget far beyond any table (set to mean "no byte limit")
	// shares as any other: no overflow into a share of one byte.
	vast := NewBudget(2000, 1<<62)
	x, _ := member(vast, 100, 10000), member(vast, 100, 10000)
	rows, bytes = vast.room(x)
	require.Equal(t, 1000, rows)
	require.EqualValues(t, int64(1)<<61, bytes)
}
