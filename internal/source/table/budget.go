package table

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
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
// no row gets at least one, even over the byte share. So a table with a
// huge backlog, huge rows or rows stuck in flight holds its share and no
// more, and a table that starts to have work gets its share as the others
// settle.
//
// Among the tables with a backlog (their last claim was full), the row
// shares are weighted by backlog: their equal shares together are split in
// proportion to each one's backlog, as Weigh last counted it (up to
// outbox.BacklogCap rows), with the floor of one batch taken out of the
// bigger tables' parts (weights.rowShare). A table with 10,000 rows or
// more waiting so holds five times the rows of one with 2,000, and the
// two drain in about the same time while the in-flight budget is what
// bounds them. The tables without a backlog keep their equal share, and
// the latency it buys their next rows. Until every backlogged table is
// counted, the shares are equal. The byte shares are equal: a
// backlogged table's claims stopped by their byte share are not full, and
// weighting bytes by rows waiting would make the weights come and go.
//
// Claims (and the probes before them) take turns: one at a time, in the
// order they asked (a Go channel's waiting senders are served first in,
// first out), so that a table with work waits at most one claim of every
// other table.
type Budget struct {
	// Weighed receives the backlogs Weigh counted, by table name.
	Weighed *source.TestSignal[map[string]int64]

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
// its share (Budget), and of the whole budget. When either is used up, s
// is woken (Subscriber.Wake) by the next settlement of any table.
func (b *Budget) room(s *Subscriber) (int, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rows, bytes, w := b.tally(s)
	own, ownBytes := int(s.outstanding.Load()), s.outstandingBytes.Load()
	room := min(max(w.rowShare(s, b.rows), s.cfg.BatchSize, 1)-own, b.rows-rows)
	byteRoom := min(max(b.bytes/int64(w.active), 1)-ownBytes, b.bytes-bytes)
	if own == 0 && room > 0 {
		byteRoom = max(byteRoom, 1) // a table holding nothing takes at least one row
	}
	if (room <= 0 || byteRoom <= 0) && !b.members[s] {
		b.members[s] = true
		b.waiting++
	}
	return room, byteRoom
}

// tally returns the rows and bytes the members hold and the weights of
// the tables with work: those holding rows or having claimed within
// activeWindow, and s (nil: none) however that is. Call it with b.mu held.
func (b *Budget) tally(s *Subscriber) (rows int, bytes int64, w weights) {
	recent := time.Now().Add(-activeWindow).UnixNano()
	for m := range b.members {
		held := m.outstanding.Load()
		rows += int(held)
		bytes += m.outstandingBytes.Load()
		if m != s && (held > 0 || m.claimer.lastClaim.Load() > recent) {
			w.add(m)
		}
	}
	if s != nil {
		w.add(s)
	}
	return rows, bytes, w
}

// weights are the tables with work, for their shares.
type weights struct {
	active    int         // tables with work
	backlog   []backlogOf // of which those with a backlog (their last claim full)
	floors    int         // their batches, summed
	uncounted bool        // a backlogged table's backlog is not counted yet
}

// backlogOf is a table with a backlog and its weight.
type backlogOf struct {
	sub *Subscriber
	n   int64 // its backlog as counted; < 0: not counted yet
}

func (w *weights) add(m *Subscriber) {
	w.active++
	if n := m.claimer.backlog.Load(); n != 0 {
		w.backlog = append(w.backlog, backlogOf{m, n})
		w.floors += max(m.cfg.BatchSize, 1)
		w.uncounted = w.uncounted || n < 0
	}
}

// weighed reports whether the backlogs split the shares: two tables or
// more with a backlog, and their equal shares together more than a batch
// for each (with less, each gets its batch, whatever the weights).
func (w *weights) weighed(rows int) bool {
	return len(w.backlog) >= 2 && (rows/max(w.active, 1))*len(w.backlog) > w.floors
}

// rowShare is s's share of rows, before the floor of one batch: the
// budget over the tables with work; when the backlogs weigh (weighed) and
// are all counted, a backlogged table's share is from their equal shares
// together (the pool), split by backlog: the tables in order of backlog,
// smallest first, each taking its part of what is left of the pool, or
// its batch when that is more, so that the floors come out of the bigger
// tables' parts and not out of the tables without a backlog.
func (w *weights) rowShare(s *Subscriber, rows int) int {
	equal := rows / max(w.active, 1)
	if !w.weighed(rows) || w.uncounted || s.claimer.backlog.Load() <= 0 {
		return equal
	}
	slices.SortFunc(w.backlog, func(a, b backlogOf) int { return cmp.Compare(a.n, b.n) })
	left := int64(equal * len(w.backlog))
	var total int64
	for _, t := range w.backlog {
		total += t.n
	}
	for _, t := range w.backlog {
		part := max(left*t.n/max(total, 1), int64(max(t.sub.cfg.BatchSize, 1)))
		if t.sub == s {
			return int(part)
		}
		left, total = left-part, total-t.n
	}
	return equal // s was not counted among them: not reached
}

// Weigh counts the backlog of the tables that have one (their last claim
// was full) in one statement (outbox.DB.BacklogEach), while the backlogs
// weigh the shares (weights.weighed: two tables or more with a backlog,
// and a budget of more than a batch for each, so fewer than
// relay.max_in_flight / relay.batch_size tables, 3 by default):
// within weighCheck of a table's claims filling up, then every
// weighInterval, until ctx ends. A count that fails leaves the weights as
// they were (a table not counted yet: equal shares) and is tried again
// after weighInterval; the claims' own errors name what is wrong.
func (b *Budget) Weigh(ctx context.Context, db *outbox.DB, logger *slog.Logger) {
	t := time.NewTicker(weighCheck)
	defer t.Stop()
	var last time.Time
	var failed bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		subs := b.weighable()
		if len(subs) == 0 {
			continue
		}
		if time.Since(last) < weighInterval && (failed || !slices.ContainsFunc(subs, uncounted)) {
			continue
		}
		last = time.Now()
		// In the order of the tables' names: the same statement round
		// after round while the same tables have a backlog.
		slices.SortFunc(subs, func(a, b *Subscriber) int { return strings.Compare(a.store.Table(), b.store.Table()) })
		stores := make([]*outbox.Store, len(subs))
		for i, s := range subs {
			stores[i] = s.store
		}
		cctx, cancel := context.WithTimeout(ctx, subs[0].cfg.statementTimeout())
		counts, err := db.BacklogEach(cctx, stores)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				level := slog.LevelDebug
				if !failed {
					level = slog.LevelWarn
				}
				logger.Log(ctx, level, "count of the backlogged tables' backlogs failed; their shares stay as they were", slog.Int("tables", len(subs)), slog.Any("error", err), slog.Duration("retry_in", weighInterval))
			}
			failed = true
			continue
		}
		failed = false
		weighed := make(map[string]int64, len(subs))
		for i, s := range subs {
			s.claimer.setBacklog(counts[i])
			weighed[s.store.Table()] = counts[i]
		}
		b.Weighed.Signal(weighed)
	}
}

// weighable returns the tables whose backlog Weigh should count now.
func (b *Budget) weighable() []*Subscriber {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, _, w := b.tally(nil)
	if !w.weighed(b.rows) {
		return nil
	}
	subs := make([]*Subscriber, len(w.backlog))
	for i, t := range w.backlog {
		subs[i] = t.sub
	}
	return subs
}

// uncounted reports whether s has a backlog not counted yet.
func uncounted(s *Subscriber) bool { return s.claimer.backlog.Load() < 0 }

// weighInterval is how often Weigh counts the backlogs; weighCheck is how
// soon it counts a table's backlog not counted yet (a table whose claims
// just filled up).
const (
	weighInterval = 2 * time.Second
	weighCheck    = 200 * time.Millisecond
)

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
