package table

import (
	"sync"
	"time"
)

// Budget is the in-flight budget of one relay over many tables
// (database.tables): relay.max_in_flight rows and relay.max_in_flight_bytes
// bytes, claimed and not yet settled, shared by the tables' subscribers
// (SubscriberConfig.Budget), and the turn their claims take.
//
// Each table may hold at most its share: the budget divided by the tables
// with work (holding rows now, or having claimed some within activeWindow:
// a table of steady single rows holds one for milliseconds, and its next
// row would otherwise queue behind a backlog table's whole budget in the
// NATS connection and the stream), counting the one that asks, or one batch
// (relay.batch_size) when that is more, so that claims stay full-sized
// however many tables have work (bridge-bench's tables phase: with shares
// of 20 rows, 100 tables relayed 0.71× the rate of one); a table holding
// no row gets at least one, even over the byte share. So a table with a huge backlog, huge rows or rows stuck in flight
// holds its share and no more, and a table that starts to have work gets
// its share as the others settle. Claims (and the probes before them) take
// turns: one at a time, in the order they asked (a Go channel's waiting
// senders are served first in, first out), so that a table with work waits
// at most one claim of every other table.
type Budget struct {
	rows  int
	bytes int64
	turn  chan struct{}

	mu      sync.Mutex
	members map[*Subscriber]bool // → refused room since the last settlement
	waiting int                  // members refused room
}

// NewBudget returns a budget of rows and bytes (both at least 1).
func NewBudget(rows int, bytes int64) *Budget {
	return &Budget{rows: max(rows, 1), bytes: max(bytes, 1), turn: make(chan struct{}, 1), members: map[*Subscriber]bool{}}
}

// join adds s to the tables sharing the budget.
func (b *Budget) join(s *Subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.members[s] = false
}

// leave removes s; its rows no longer count.
func (b *Budget) leave(s *Subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.members[s] {
		b.waiting--
	}
	delete(b.members, s)
}

// room returns how many rows and bytes s may claim now: what is left of
// its share, and of the whole budget. When either is used up, s is woken
// (Subscriber.Wake) by the next settlement of any table.
func (b *Budget) room(s *Subscriber) (int, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var rows, active int
	var bytes int64
	recent := time.Now().Add(-activeWindow).UnixNano()
	for m := range b.members {
		held := m.outstanding.Load()
		rows += int(held)
		bytes += m.outstandingBytes.Load()
		if m != s && (held > 0 || m.claimer.lastClaim.Load() > recent) {
			active++
		}
	}
	active++ // s
	own, ownBytes := int(s.outstanding.Load()), s.outstandingBytes.Load()
	room := min(max(b.rows/active, s.cfg.BatchSize, 1)-own, b.rows-rows)
	byteRoom := min(max(b.bytes/int64(active), 1)-ownBytes, b.bytes-bytes)
	if own == 0 && room > 0 {
		byteRoom = max(byteRoom, 1) // a table holding nothing takes at least one row
	}
	if (room <= 0 || byteRoom <= 0) && !b.members[s] {
		b.members[s] = true
		b.waiting++
	}
	return room, byteRoom
}

// freed wakes the tables that were refused room; a settlement of any
// table calls it.
func (b *Budget) freed() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiting == 0 {
		return
	}
	for m, refused := range b.members {
		if refused {
			b.members[m] = false
			m.Wake()
		}
	}
	b.waiting = 0
}

// takeTurn waits for the turn to claim; false when stop closed first. A
// nil budget has no turns.
func (b *Budget) takeTurn(stop <-chan struct{}) bool {
	if b == nil {
		return true
	}
	select {
	case b.turn <- struct{}{}:
		return true
	case <-stop:
		return false
	}
}

// endTurn hands the turn to the next claim.
func (b *Budget) endTurn() {
	if b != nil {
		<-b.turn
	}
}

// activeWindow is how recently a table must have claimed rows to count as
// one with work (Budget.room). Beside a 100,000-row backlog, steady rows of
// four other tables waited 249 ms at p99 (23 ms alone) while only the
// tables holding rows counted, the backlog table then holding up to half
// of relay.max_in_flight.
const activeWindow = time.Second

// room is how many rows and bytes the next claim may take: the budget's
// share when the subscriber shares one, its own bounds otherwise.
func (s *Subscriber) room() (int, int64) {
	if s.cfg.Budget != nil {
		return s.cfg.Budget.room(s)
	}
	return s.cfg.MaxInFlight - int(s.outstanding.Load()), s.cfg.MaxInFlightBytes - s.outstandingBytes.Load()
}

// settleQueue is the capacity of the queue of settlements to write: one
// per row the subscriber may hold, or, for a table sharing a budget with
// many others, one write's worth (a full queue only makes its senders
// wait for the write in progress).
func settleQueue(cfg SubscriberConfig) int {
	if cfg.Budget != nil {
		return min(cfg.MaxInFlight, memberSettleQueue)
	}
	return cfg.MaxInFlight
}

// memberSettleQueue is the settlement queue of a table sharing a budget:
// 256 settlements (about 80 KB), where a table of its own takes one per
// row of relay.max_in_flight; a relay over 200 tables would otherwise
// hold 200 such queues.
const memberSettleQueue = 256
