package postgreswal

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// sweepRequest is the sweeper's side of a sweep: a token whose watermark
// the pipeline answers with the ids it holds, or rows to append.
type sweepRequest struct {
	token string
	ids   chan held
	rows  []outbox.Row
	// stored: the rows found in their stream by the sweep's reconcile,
	// settled as relayed instead of published.
	stored map[int64]dedup.Stored
	// appended is closed once the rows are in the window.
	appended chan struct{}
	// gone: rows set aside that the table no longer holds as failed
	// (relayed, a dead letter, deleted): they hold their keys no longer;
	// released: the rows that waited for them, due now.
	gone     []int64
	released chan []int64
}

// held is the pipeline's answer to a watermark: the ids of the rows it
// holds, and of the rows set aside whose failed mark is written.
type held struct {
	ids   map[int64]bool
	aside []int64
}

// The sweep publishes the pending rows that the slot will not deliver:
// rows committed before the slot existed (written while source: table ran,
// or before a lost slot was created again), dead letters put back by
// `bridge retry` (an UPDATE, which the publication does not carry), and
// rows left in flight by relays of source: table. Without it such rows
// would stay pending for ever.
//
// A pending row is swept only when the stream is known to have passed it
// without delivering it. Each round reads up to SweepBatch pending rows,
// then writes a watermark into the log (pg_logical_emit_message in a
// transaction of its own, after the read). The log delivers transactions
// in commit order, so when the watermark arrives, every row the read saw
// that the slot delivers has been delivered: it is in the pipeline, or
// settled and no longer pending. The rows of the read that the pipeline
// does not hold and that are still pending are therefore not coming from
// the slot, and are appended to the window. Swept rows are published
// after the rows read before them, in id order among themselves: not in
// commit order.
//
// The sweeper runs the rounds; the pipeline answers its requests
// (sweepRequest) between the events of the stream.
type sweeper struct {
	db     *sql.DB
	q      outbox.WALStatements
	store  *outbox.Store // requeues the rows relays of source: table left in flight
	cfg    Config        // SweepInterval, SweepBatch, InflightTimeout, MaxInFlightBytes, MaxPayload, Slot, Reconciler
	logger *slog.Logger
	// swept counts the rows it appended (Counters.Swept).
	swept       *atomic.Int64
	clockOffset *atomic.Int64 // server clock minus this process's, ns
	// streaming reports whether this relay reads the slot now.
	streaming func() bool
	// asides is what the pipeline says of the rows set aside (nil: none).
	asides *asideState
	// health is what the last sweep found, for readiness.
	health *source.SweepHealth
	// requests go to the pipeline; now asks for a round at once (the
	// backoff of a row set aside ended, or rows waiting for one are
	// released).
	requests chan<- sweepRequest
	now      chan struct{}
	closing  <-chan struct{}
	ctx      context.Context // the Subscriber's hardCtx
}

// sweeper returns the Subscriber's sweeper.
func (s *Subscriber) sweeper() *sweeper {
	return &sweeper{
		db: s.db.SQL, q: s.q, store: s.store, cfg: s.cfg, logger: s.logger, swept: &s.Counters.Swept, clockOffset: &s.stream.clockOffset,
		streaming: func() bool { return s.stream.state.Load().streaming }, asides: &s.asideSum, health: &s.swept,
		requests: s.sweeps, now: s.sweepNow, closing: s.closing, ctx: s.hardCtx,
	}
}

// run sweeps until the Subscriber closes: a round every SweepInterval
// while the stream runs, the first one interval after the start (rows
// pending at the start may still be on their way from the slot), and as
// soon as now is signalled.
func (sw *sweeper) run() {
	for {
		select {
		case <-sw.closing:
			return
		case <-time.After(sw.cfg.SweepInterval):
		case <-sw.now:
		}
		if !sw.streaming() {
			// A watermark written now might never arrive: another
			// process reads the slot (a standby), or none does yet;
			// the first session sends no restart that would end the
			// wait for it.
			continue
		}
		switch err := sw.sweep(sw.ctx); {
		case err == nil:
			sw.health.Completed()
		case source.Closed(sw.closing):
		default:
			_, lookErr := resolveTable(sw.ctx, sw.db, sw.cfg.Table)
			sw.health.Failed(sw.logger, sw.cfg.Table, err, lookErr, "sweep of pending rows failed; trying again at the next interval")
		}
	}
}

// sweep runs rounds until one reads fewer rows than a batch.
func (sw *sweeper) sweep(ctx context.Context) error {
	requeued, err := sw.store.RequeueInflightOlderThan(ctx, sw.cfg.InflightTimeout)
	if err != nil {
		return err
	}
	if requeued > 0 {
		sw.logger.Info("sweep: rows left in flight by relays of source: table are pending again", slog.Int("rows", requeued))
	}
	after := int64(0)
	for round := 0; ; round++ {
		rows, more, err := sw.pendingRows(ctx, after)
		if err != nil || (len(rows) == 0 && (round > 0 || sw.asides.Load() == nil)) {
			return err
		}
		if len(rows) > 0 {
			after = rows[len(rows)-1].ID
		}
		h, ok := sw.watermark(ctx)
		if !ok {
			return nil // closing
		}
		if round == 0 {
			if err := sw.forgetAsides(ctx, h.aside); err != nil {
				return err
			}
		}
		if len(rows) == 0 {
			return nil
		}
		var ids []int64
		for _, r := range rows {
			if !h.ids[r.ID] {
				ids = append(ids, r.ID)
			}
		}
		still, err := sw.stillPending(ctx, ids)
		if err != nil {
			return err
		}
		var sweep []outbox.Row
		for _, r := range rows {
			if still[r.ID] {
				sweep = append(sweep, r)
			}
		}
		if len(sweep) > 0 {
			sw.logger.Info("sweep: publishing pending rows the replication slot will not deliver",
				slog.Int("rows", len(sweep)), slog.Int64("first_row_id", sweep[0].ID))
			req := sweepRequest{rows: sweep, stored: sw.reconcileSwept(ctx, sweep), appended: make(chan struct{})}
			select {
			case sw.requests <- req:
			case <-sw.closing:
				return nil
			}
			select {
			case <-req.appended:
			case <-sw.closing:
				return nil
			}
			sw.swept.Add(int64(len(sweep)))
		}
		if !more {
			return nil
		}
	}
}

// watermark writes a watermark into the log and returns what the pipeline
// holds when it arrives; false when the subscriber closes or the stream
// restarts first.
func (sw *sweeper) watermark(ctx context.Context) (held, bool) {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	req := sweepRequest{token: hex.EncodeToString(b), ids: make(chan held, 1)}
	select {
	case sw.requests <- req:
	case <-sw.closing:
		return held{}, false
	}
	if _, err := sw.db.ExecContext(ctx, "SELECT pg_logical_emit_message(true, $1, $2)", sw.cfg.watermarkPrefix(), req.token); err != nil {
		sw.logger.Warn("sweep: write watermark", slog.Any("error", err))
		return held{}, false
	}
	select {
	case h, ok := <-req.ids:
		return h, ok // closed: the stream restarted; the next round tries again
	case <-sw.closing:
		return held{}, false
	}
}

// pendingRows reads pending or failed rows with an id above after, whose
// available_at has passed, in id order: up to SweepBatch rows, and within
// MaxInFlightBytes (payloads and headers; at least one row), as the table
// source's claim does. A payload longer than the payload limit is not
// read: the row is PayloadLeftOut, and becomes a dead letter from its
// length. more says whether rows may be left after these.
func (sw *sweeper) pendingRows(ctx context.Context, after int64) (out []outbox.Row, more bool, err error) {
	limit := sw.cfg.PayloadLimit()
	if limit <= 0 {
		limit = math.MaxInt64
	}
	rows, err := sw.db.QueryContext(ctx, sw.q.SweepRead, after, sw.cfg.SweepBatch, sw.cfg.MaxInFlightBytes, limit)
	if err != nil {
		return nil, false, fmt.Errorf("sweep: read pending rows: %w", err)
	}
	defer rows.Close()
	var candidates int
	for rows.Next() {
		var r outbox.Row
		var headers sql.NullString
		var first sql.NullTime
		if err := rows.Scan(&r.ID, &r.IdempotencyKey, &r.Subject, &r.Payload, &headers, &r.OrderingKey, &r.Attempt, &r.CreatedAt, &first,
			&r.PayloadSize, &candidates); err != nil {
			return nil, false, fmt.Errorf("sweep: read pending rows: %w", err)
		}
		switch {
		case r.PayloadSize > limit:
			r.Payload, r.PayloadLeftOut = nil, true
		case r.Payload == nil:
			r.Payload = []byte{}
		}
		r.Headers, r.CreatedAt, r.FirstClaimedAt = []byte(headers.String), r.CreatedAt.UTC(), first.Time
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("sweep: read pending rows: %w", err)
	}
	return out, len(out) < candidates || candidates == sw.cfg.SweepBatch, nil
}

// stillPending returns which of ids are still pending or failed.
func (sw *sweeper) stillPending(ctx context.Context, ids []int64) (map[int64]bool, error) {
	return sw.which(ctx, sw.q.StillPending, ids, "check pending rows")
}

// stillFailed returns which of ids the table holds as failed.
func (sw *sweeper) stillFailed(ctx context.Context, ids []int64) (map[int64]bool, error) {
	return sw.which(ctx, sw.q.StillFailed, ids, "check rows set aside")
}

// which returns the ids that query (its argument: ids) returns.
func (sw *sweeper) which(ctx context.Context, query string, ids []int64, what string) (map[int64]bool, error) {
	out := map[int64]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := sw.db.QueryContext(ctx, query, ids)
	if err != nil {
		return nil, fmt.Errorf("sweep: %s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sweep: %s: %w", what, err)
		}
		out[id] = true
	}
	return out, rows.Err()
}

// forgetAsides tells the pipeline which of the rows set aside (ids) the
// table no longer holds as failed: relayed by another relay, a dead
// letter, deleted, or put back to pending by hand.
func (sw *sweeper) forgetAsides(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	still, err := sw.stillFailed(ctx, ids)
	if err != nil {
		return err
	}
	var gone []int64
	for _, id := range ids {
		if !still[id] {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	req := sweepRequest{gone: gone, released: make(chan []int64, 1)}
	select {
	case sw.requests <- req:
	case <-sw.closing:
		return nil
	}
	var released []int64
	select {
	case released = <-req.released:
	case <-sw.closing:
		return nil
	}
	if len(released) == 0 {
		return nil
	}
	// The rows that waited for them are due now: the next round (asked
	// for at once) brings them back.
	if _, err := sw.db.ExecContext(ctx, sw.q.Release, released); err != nil {
		return fmt.Errorf("sweep: release the rows waiting for rows set aside: %w", err)
	}
	sw.logger.Info("sweep: rows set aside are settled elsewhere (relayed, deleted); the rows of their ordering keys waiting for them go on",
		slog.Int("released", len(released)))
	select {
	case sw.now <- struct{}{}:
	default:
	}
	return nil
}

// reconcileSwept looks up in their stream the swept rows published before
// (set aside, or left by a relay of source: table) longer ago than the
// stream's duplicate window allows (dedup.Reconciler): JetStream would
// store them again. It returns those found; on any error none, and the
// rows are published as usual.
func (sw *sweeper) reconcileSwept(ctx context.Context, rows []outbox.Row) map[int64]dedup.Stored {
	if sw.cfg.Reconciler == nil {
		return nil
	}
	now := time.Now().Add(time.Duration(sw.clockOffset.Load())) // database clock
	var candidates []dedup.Candidate
	for _, r := range rows {
		if !r.FirstClaimedAt.IsZero() {
			candidates = append(candidates, dedup.Candidate{ID: r.ID, IdempotencyKey: r.IdempotencyKey, Subject: r.Subject, FirstClaimedAt: r.FirstClaimedAt, ClaimedAt: now})
		}
	}
	found, _ := source.FindInDoubt(ctx, sw.cfg.Reconciler, candidates, sw.logger, "sweep")
	return found
}
