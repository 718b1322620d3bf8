package table

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// Prober is the one wake-up of a relay over many tables: the tables whose
// last claim was not full wait (park) instead of probing each on its own,
// and the prober asks for all of them in one statement per poll
// (outbox.DB.MayClaimEach), waking those with a row to claim. Its poll
// adapts as one table's does (nextPoll): PollFloor after a poll that woke
// a table or after a table parked having claimed rows, growing by half
// per empty poll up to relay.poll_interval. An idle relay over 100 tables
// so costs its database one statement per poll interval, not 100 (on the
// 2-core machine, PostgreSQL 15: 20 % of a core before).
//
// A statement that fails (a table dropped, which fails the whole union)
// wakes every parked table: each claims on its own, and its own errors say
// which table is wrong.
type Prober struct {
	db     *outbox.DB
	poll   time.Duration
	logger *slog.Logger

	// Probed receives the number of tables each poll asked about.
	Probed *source.TestSignal[int]

	mu     sync.Mutex
	parked map[*Subscriber]struct{}
	soon   chan struct{} // a table parked after claiming rows: poll again soon
}

// NewProber returns the prober of db's tables, polling at most every
// poll.
func NewProber(db *outbox.DB, poll time.Duration, logger *slog.Logger) *Prober {
	return &Prober{db: db, poll: poll, logger: logger, parked: map[*Subscriber]struct{}{}, soon: make(chan struct{}, 1)}
}

// park makes s wait for the prober: it is woken (Subscriber.Wake) when its
// table has a row to claim. took says whether s's last claim took rows
// (more may follow soon).
func (p *Prober) park(s *Subscriber, took bool) {
	p.mu.Lock()
	p.parked[s] = struct{}{}
	p.mu.Unlock()
	if took {
		select {
		case p.soon <- struct{}{}:
		default:
		}
	}
}

// unpark removes s (woken by other means, or leaving).
func (p *Prober) unpark(s *Subscriber) {
	p.mu.Lock()
	delete(p.parked, s)
	p.mu.Unlock()
}

// Run polls until ctx ends.
func (p *Prober) Run(ctx context.Context) {
	wait := p.poll
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.soon:
			if !t.Stop() {
				<-t.C
			}
			wait = min(PollFloor, p.poll)
		case <-t.C:
		}
		start := time.Now()
		woke := p.probe(ctx)
		// The statement's cost grows with the tables it asks about: at
		// least four times its length between polls, so that probing
		// takes at most a fifth of a session while rows arrive.
		wait = max(nextPoll(wait, woke, p.poll), min(4*time.Since(start), p.poll))
		t.Reset(wait)
	}
}

// probe asks about every parked table in one statement and wakes those
// with a row to claim; it returns how many it woke.
func (p *Prober) probe(ctx context.Context) int {
	p.mu.Lock()
	subs := make([]*Subscriber, 0, len(p.parked))
	for s := range p.parked {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	if len(subs) == 0 {
		return 0
	}
	// In the order of the tables' names: the same statement poll after
	// poll while the same tables wait, which the server then plans once.
	slices.SortFunc(subs, func(a, b *Subscriber) int { return strings.Compare(a.store.Table(), b.store.Table()) })
	stores := make([]*outbox.Store, len(subs))
	for i, s := range subs {
		stores[i] = s.store
	}
	sctx, cancel := context.WithTimeout(ctx, subs[0].cfg.statementTimeout())
	claimable, err := p.db.MayClaimEach(sctx, stores)
	cancel()
	p.Probed.Signal(len(subs))
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		p.logger.Warn("probe of the idle outbox tables failed; each claims on its own", slog.Int("tables", len(subs)), slog.Any("error", err))
		claimable = make([]bool, len(subs))
		for i := range claimable {
			claimable[i] = true
		}
	}
	var woke int
	for i, s := range subs {
		if claimable[i] {
			p.unpark(s)
			s.Wake()
			woke++
		}
	}
	return woke
}
