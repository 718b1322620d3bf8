package table

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// claimer is the table source's claim loop, a service of the Subscriber:
// it claims rows in ticks (a claim of up to BatchSize rows while fewer
// than MaxInFlight messages are unsettled and they hold less than
// MaxInFlightBytes), reconciles the rows in doubt, and emits the rest on
// out, until Stop. The Subscriber stops it first as it closes, before the
// other services and the drain.
//
// Stop does not cancel a tick in progress: a claim cut short after its
// commit would leave its rows leased to nobody until their lease expires;
// finished, its rows are released at once. Its statements run with the
// context given to Start (the Subscriber's hardCtx), which Stop does not
// end.
type claimer struct {
	source.StartStop
	sub *Subscriber
	// out is the Subscriber's message channel, set by Subscribe before
	// Start.
	out chan<- *message.Message

	// health is the recent record of the claims, for readiness.
	health source.LoopHealth
	// lastClaim is the unix nanoseconds of the last claim that took rows
	// (or of NewSubscriber).
	lastClaim atomic.Int64
	// backlog weighs the table's share of a shared budget: 0 while its
	// last claim statement was not full; while it was (more rows may
	// wait), the backlog as last counted (Budget.Weigh), or -1 when not
	// counted since the claims filled up.
	backlog atomic.Int64

	// probe: the last claim was not full, so the next tick asks first
	// whether any row is claimable (see tick). lastFullRun is when the
	// last claim statement ran; probes only run while it is less than
	// claimProbeSpan × PollInterval ago. Used by the claim loop only.
	probe       bool
	lastFullRun time.Time
	// ranClaim: the last tick ran a claim statement (it did not stop at a
	// full window or a closed gate). Used by the claim loop only.
	ranClaim bool
}

// claimProbeSpan bounds, in poll intervals, how long the claim loop goes
// on probing without a claim (10 s with the default 250 ms): the probe
// (outbox.Store.Stalled with age 0, "is a row claimable now, not behind an
// unsettled row of its key") asks what the claim would find, and the
// claim every claimProbeSpan poll intervals makes sure that a probe that
// answered wrong delays rows by no more than that.
const claimProbeSpan = 40

// parkedClaimSpan bounds, in poll intervals, how long a table waiting for
// the prober of a relay over many tables goes without a claim (1 min with
// the default 250 ms): the prober's statement never answers false with a
// row to claim and wakes every table when it fails, so this only bounds
// what an unforeseen wrong answer costs; a claim per table every 10 s, as
// claimProbeSpan, was a fifth of an idle relay's database CPU over 100
// tables.
const parkedClaimSpan = 6 * claimProbeSpan

// setBacklog records n, the backlog counted, unless the table's claims
// stopped being full meanwhile (backlog 0).
func (c *claimer) setBacklog(n int64) {
	for {
		old := c.backlog.Load()
		if old == 0 || c.backlog.CompareAndSwap(old, max(n, 1)) {
			return
		}
	}
}

func newClaimer(sub *Subscriber) *claimer {
	c := &claimer{sub: sub}
	c.lastClaim.Store(time.Now().UnixNano())
	return c
}

// Start runs the claim loop until Stop. Its statements run with ctx.
func (c *claimer) Start(ctx context.Context) {
	c.StartLoop(ctx, func(stop context.Context) { c.claimLoop(ctx, stop.Done()) })
}

// claimLoop runs ticks until stop is closed. A tick in progress then is
// not cancelled (see claimer).
func (c *claimer) claimLoop(ctx context.Context, stop <-chan struct{}) {
	s := c.sub
	var failures int
	wait := s.cfg.PollInterval
	for !source.Closed(stop) {
		full, took, err := c.tick(ctx, stop)
		switch {
		case err != nil && source.Closed(stop):
			return
		case err != nil:
			if s.cfg.OnMissingTable != nil && outbox.IsMissingTable(err) {
				s.cfg.OnMissingTable()
			}
			failures++
			wait := min(s.cfg.PollInterval*time.Duration(1<<min(failures, 6)), 30*time.Second)
			s.logger.Log(ctx, outbox.FailureLevel(err), "relay tick failed", slog.Any("error", err), slog.Duration("retry_in", wait))
			c.sleepAfterFailure(wait, stop)
		case full:
			failures = 0
			wait = min(PollFloor, s.cfg.PollInterval)
		case s.cfg.Prober != nil && c.ranClaim:
			// One relay over many tables: the prober asks for every
			// waiting table in one statement and wakes this one when
			// it has a row to claim.
			failures = 0
			s.cfg.Prober.park(s, took > 0)
			c.sleep(parkedClaimSpan*s.cfg.PollInterval, stop)
			s.cfg.Prober.unpark(s)
		default:
			failures = 0
			wait = nextPoll(wait, took, s.cfg.PollInterval)
			c.sleep(wait, stop)
		}
	}
}

// PollFloor is the shortest wait between claims: the wait after a claim
// that took rows. See nextPoll.
const PollFloor = time.Millisecond

// pollGrowth is the factor by which the wait grows after each claim that
// took no row, up to the poll interval.
const pollGrowth = 1.5

// nextPoll is the wait before the next claim after one that was not full
// (took is the number of rows it took): the relay's wake-up, which asks
// nothing of the producers' transactions (no NOTIFY; see docs/DESIGN.md,
// "The wake-up"). While rows arrive the claims follow them closely: after
// a claim that took rows the wait is PollFloor, and it grows by pollGrowth
// after each empty claim, up to max (relay.poll_interval) once the table
// has been quiet for about 3 × max. A row committed t after the last one
// claimed therefore waits at most about t/2 (and at most max): at
// 200 rows/s the waits are a few milliseconds, while an idle table costs
// one claim per max.
func nextPoll(prev time.Duration, took int, max time.Duration) time.Duration {
	if took > 0 {
		return min(PollFloor, max)
	}
	return min(time.Duration(float64(prev)*pollGrowth), max)
}

// tick claims as many rows as there is room for and emits them. It
// reports whether the claim was full, i.e. more rows may be waiting, and
// how many rows it took.
//
// After a claim that was not full, a tick first probes whether a row is
// claimable and claims only if one is (or after claimProbeSpan poll
// intervals without a claim).
func (c *claimer) tick(ctx context.Context, stop <-chan struct{}) (full bool, took int, err error) {
	s := c.sub
	c.ranClaim = false
	room, byteRoom := s.room()
	if room <= 0 || byteRoom <= 0 {
		s.Signals.Claimed.Signal(0) // a tick that took nothing: the window is full
		return false, 0, nil        // a settlement wakes the loop
	}
	if s.cfg.CanClaim != nil && !s.cfg.CanClaim() {
		s.Signals.Claimed.Signal(0) // a tick that took nothing: NATS does not answer
		return false, 0, nil
	}
	// The claim and its probe wait their turn behind the other tables'
	// (one relay over many tables); with one table there is none.
	if !s.cfg.Budget.takeTurn(stop) {
		return false, 0, nil
	}
	turn := true
	endTurn := func() {
		if turn {
			turn = false
			s.cfg.Budget.endTurn()
		}
	}
	defer endTurn()
	if c.probe && s.cfg.Prober == nil && s.store.DB().Capabilities().ProbeBeforeClaim && time.Since(c.lastFullRun) < claimProbeSpan*s.cfg.PollInterval {
		// After a claim that was not full, most polls find nothing: a
		// probe costs the database a fraction of a claim (on
		// PostgreSQL 15, 2-core machine, behind a pooler, where every
		// statement is planned: about 0.4 ms of backend CPU against
		// 3.3 ms for an empty claim; see Capabilities.ProbeBeforeClaim),
		// which makes frequent polls affordable.
		var claimable bool
		err = s.statement(ctx, &c.health, func(ctx context.Context) (err error) {
			claimable, err = s.store.MayClaim(ctx)
			return err
		})
		if err != nil {
			return false, 0, err
		}
		if !claimable {
			s.Signals.Claimed.Signal(0) // a tick that took nothing
			return false, 0, nil
		}
	}
	limit := min(s.cfg.BatchSize, room)
	start := time.Now()
	c.lastFullRun = start
	c.ranClaim = true
	var rows []outbox.Row
	err = s.statement(ctx, &c.health, func(ctx context.Context) (err error) {
		rows, err = s.store.ClaimBatch(ctx, outbox.ClaimParams{Owner: s.cfg.Owner, Limit: limit, MaxBytes: byteRoom, MaxPayload: c.payloadLimit()})
		return err
	})
	endTurn()
	if err != nil {
		return false, 0, err
	}
	c.probe = len(rows) < limit
	if len(rows) == limit {
		c.backlog.CompareAndSwap(0, -1) // filled up: to be counted
	} else {
		c.backlog.Store(0) // drained: counted again should it fill up
	}
	var size int64
	for i := range rows {
		size += rows[i].Size()
	}
	s.outstandingBytes.Add(size)
	s.logger.Debug("claimed", slog.Int("rows", len(rows)), slog.Int("limit", limit), slog.Int64("bytes", size), slog.Duration("took", time.Since(start)))
	s.Counters.Claimed.Add(int64(len(rows)))
	if len(rows) > 0 {
		c.lastClaim.Store(time.Now().UnixNano())
	}
	s.Signals.Claimed.Signal(len(rows))
	took = len(rows)
	claimed := claimWindow{start, time.Now()}
	rows = c.reconcile(ctx, rows, start)
	if !s.emit(rows, claimed, c.out, stop) {
		return false, took, nil
	}
	return len(rows) == limit, took, nil
}

// payloadLimit is the longest payload the claim reads: the server's
// max_payload less the smallest headers a row's message has, so that a
// row left out could never be published; 0 when the limit is unknown.
func (c *claimer) payloadLimit() int64 {
	if c.sub.cfg.MaxPayload == nil {
		return 0
	}
	return outbox.PayloadMaxBytes(c.sub.cfg.MaxPayload())
}

// sleepAfterFailure waits d after a failed tick: neither a notification
// nor a settlement ends it (Wake), so that a database that refuses every
// claim is not asked again at the rate rows are inserted.
func (c *claimer) sleepAfterFailure(d time.Duration, stop <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
	}
}

func (c *claimer) sleep(d time.Duration, stop <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.sub.wake:
	case <-stop:
	}
}

// Reconciler settles rows whose earlier publish may have been stored beyond
// the duplicate window; see dedup.Reconciler.
type Reconciler interface {
	InDoubt(ctx context.Context, c dedup.Candidate) (bool, error)
	Reconcile(ctx context.Context, candidates []dedup.Candidate) (map[int64]dedup.Stored, error)
}

// doubtHoldBack is how long a row in doubt whose stream cannot be read now
// waits before it is claimed (and its stream scanned) again: a leader
// election's length, so that it settles within seconds once the cluster
// answers.
const doubtHoldBack = 2 * time.Second

// reconcile settles the in-doubt rows found in their stream as relayed and
// returns the rows still to publish. Only rows claimed before (first claimed
// before this claim: a retried dead letter too, whose attempts were reset)
// are examined, so first claims cost nothing.
//
// It is bounded by the lease: its rows must be handed on by claimStart plus
// InflightTimeout less AckDeadline, so that their outcome is known before
// the lease ends (after it, another relay may publish them too). A row
// whose outcome cannot be told — its stream cannot be read, or the bound
// passed before it was checked — is held back (failed, the attempt not
// counted, claimed again after doubtHoldBack) rather than published again: it
// may be stored already, beyond the duplicate window. A scan that reaches
// dedup.reconcile_max_messages, dedup.reconcile_timeout or the bound
// without finding a row publishes it (see dedup.Reconciler.Reconcile).
func (c *claimer) reconcile(ctx context.Context, rows []outbox.Row, claimStart time.Time) []outbox.Row {
	s := c.sub
	if s.cfg.Reconciler == nil {
		return rows
	}
	ctx, cancel := context.WithDeadline(ctx, claimStart.Add(s.cfg.InflightTimeout-s.cfg.AckDeadline))
	defer cancel()
	var doubt []dedup.Candidate
	held := map[int64]string{}
	for _, row := range rows {
		if !row.FirstClaimedAt.Before(row.ClaimedAt) {
			continue
		}
		cand := dedup.Candidate{ID: row.ID, IdempotencyKey: row.IdempotencyKey, Subject: row.Subject, FirstClaimedAt: row.FirstClaimedAt, ClaimedAt: row.ClaimedAt}
		inDoubt, err := s.cfg.Reconciler.InDoubt(ctx, cand)
		if err != nil {
			held[row.ID] = err.Error()
			continue
		}
		if inDoubt {
			doubt = append(doubt, cand)
		}
	}
	var found map[int64]dedup.Stored
	if len(doubt) > 0 {
		var err error
		found, err = s.cfg.Reconciler.Reconcile(ctx, doubt)
		if err != nil {
			for _, cand := range doubt {
				held[cand.ID] = err.Error()
			}
		} else {
			s.logger.Info("reconciled rows in doubt against the stream", slog.Int("in_doubt", len(doubt)), slog.Int("found", len(found)))
		}
	}
	if len(found) == 0 && len(held) == 0 {
		return rows
	}
	if len(held) > 0 {
		var first string
		for _, why := range held {
			first = why
			break
		}
		s.logger.Warn("rows in doubt held back: whether their earlier publish is stored cannot be told now, and publishing them again may store them twice",
			slog.Int("rows", len(held)), slog.String("error", first), slog.Duration("retry_in", doubtHoldBack))
	}
	out := rows[:0:0]
	for _, row := range rows {
		if why, ok := held[row.ID]; ok {
			s.outstanding.Add(1)
			s.settle(settlement{row: row, err: "in doubt, not published again: " + why, held: true, holdFor: doubtHoldBack})
			continue
		}
		stored, ok := found[row.ID]
		if !ok {
			out = append(out, row)
			continue
		}
		s.outstanding.Add(1)
		st := settled(row)
		st.done, st.stream, st.seq = true, stored.Stream, stored.Seq
		s.settle(st)
	}
	return out
}
