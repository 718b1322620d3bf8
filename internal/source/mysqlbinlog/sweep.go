package mysqlbinlog

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// sweep publishes the rows the binary log will not bring: failed rows that
// are due, and pending rows created before cutoff (the moment the server's
// position the stored one now covers was read: a pending row created
// before it was either read from the log and marked, or committed after
// that position, which the log brings later and the table then marks
// settled). In id order, one row per ordering key at a time. First it puts
// back to pending the rows a source: table relay left in flight. False
// when closing cut it short.
func (p *pipeline) sweep(cutoff time.Time) bool {
	s := p.s
	ctx, cancel := context.WithTimeout(s.hardCtx, time.Minute)
	defer cancel()
	if n, err := s.store.RequeueInflightOlderThan(ctx, s.cfg.InflightTimeout); err != nil {
		s.logger.Warn("sweep: cannot put back rows left in flight", slog.Any("error", err))
	} else if n > 0 {
		s.logger.Info("sweep: put back rows a source: table relay left in flight", slog.Int("rows", n))
	}
	// The ordering keys set aside are read again from the table (the
	// session's loop runs the sweep once the marker has written every
	// batch handed to it before), kept as they were when the read fails.
	held := p.asides
	p.asides = map[string]int64{}
	if err := p.loadAsides(ctx); err != nil {
		p.asides = held
		p.sweepFailed(ctx, "sweep: cannot read the rows set aside; trying again at the next sweep", err)
		return true
	}
	cursor, missed := int64(0), 0
	for {
		rows, err := p.sweepRead(ctx, cursor, cutoff)
		if err != nil {
			p.sweepFailed(ctx, "sweep: cannot read pending rows; trying again at the next sweep", err)
			return true
		}
		if len(rows) == 0 {
			s.swept.Completed()
			p.missedByLog(missed)
			return true
		}
		// In id order, one row per ordering key a round: a second row of a
		// key ends the round before it (it is read again after the first's
		// outcome), and a row behind its key's row set aside waits.
		var publish, waiting []*entry
		keys := map[string]bool{}
		next := rows[len(rows)-1].row.ID
		for _, e := range rows {
			refused, published := s.unmarkable.refused(e.row.ID)
			if published {
				continue // in its stream, its done mark refused: not again
			}
			e.refused = refused
			if key := e.row.OrderingKey; key.Valid {
				if keys[key.String] {
					next = e.row.ID - 1
					break
				}
				if head, ok := p.asides[key.String]; ok && head < e.row.ID {
					if e.status == string(outbox.StatusPending) {
						// As from the log: failed, waiting for its key's head.
						e.result, e.reason = setAside, fmt.Sprintf("waits for row %d of its ordering key, set aside", head)
						waiting = append(waiting, e)
					}
					continue
				}
				keys[key.String] = true
			}
			publish = append(publish, e)
		}
		complete := p.publish(publish)
		for _, e := range publish {
			if e.result == acked && e.status == string(outbox.StatusPending) && e.untried && !e.refused && e.row.CreatedAt.After(p.since) {
				missed++
			}
		}
		for _, e := range publish {
			if key := e.row.OrderingKey; key.Valid && p.asides[key.String] == e.row.ID && e.result != setAside {
				delete(p.asides, key.String)
			}
		}
		s.Counters.Swept.Add(int64(len(publish)))
		s.Counters.SetAside.Add(int64(len(waiting)))
		p.jobs.put(markJob{rows: append(publish, waiting...)})
		if !complete {
			return false
		}
		cursor = next
	}
}

// sweepRead reads the next rows of the sweep after cursor.
func (p *pipeline) sweepRead(ctx context.Context, cursor int64, cutoff time.Time) ([]*entry, error) {
	s := p.s
	limit := s.cfg.PayloadLimit()
	if limit == 0 {
		limit = 1 << 62
	}
	res, err := s.db.SQL.QueryContext(ctx, s.q.SweepRead, limit, cursor, cutoff.UTC().Format("2006-01-02 15:04:05.999999"), s.cfg.SweepBatch)
	if err != nil {
		return nil, err
	}
	return scanEntries(res)
}

// scanEntries reads the rows of a query with binlog_sweep_read.sql's
// columns, and closes them.
func scanEntries(res *sql.Rows) ([]*entry, error) {
	defer res.Close()
	var out []*entry
	for res.Next() {
		e := &entry{}
		var key, okey, payload []byte
		var created string
		var size int64
		if err := res.Scan(&e.row.ID, &key, &e.row.Subject, &payload, &e.row.Headers, &okey, &e.status, &e.attempts, &created, &size, &e.untried); err != nil {
			return nil, err
		}
		e.row.IdempotencyKey = string(key)
		e.row.Payload, e.row.PayloadSize = payload, size
		e.row.PayloadLeftOut = payload == nil && size > 0
		if e.row.Payload == nil && !e.row.PayloadLeftOut {
			e.row.Payload = []byte{}
		}
		if okey != nil {
			e.row.OrderingKey = sql.NullString{String: string(okey), Valid: true}
		}
		e.row.CreatedAt, _ = time.Parse("2006-01-02 15:04:05.999999", created)
		e.at = time.Now()
		out = append(out, e)
	}
	return out, res.Err()
}

// dbNow is the database clock (UTC).
func dbNow(ctx context.Context, db *sql.DB) (time.Time, error) {
	var now string
	if err := db.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&now); err != nil {
		return time.Time{}, err
	}
	return time.Parse("2006-01-02 15:04:05.999999", now)
}

// sweepFailed logs a failed sweep and keeps it for readiness, with whether
// the outbox table is gone (source.SweepHealth.Failed).
func (p *pipeline) sweepFailed(ctx context.Context, msg string, err error) {
	s := p.s
	if ctx.Err() != nil {
		return // closing
	}
	_, _, lookErr := resolveTable(ctx, s.db.SQL, s.schema+"."+s.name)
	s.swept.Failed(s.logger, s.cfg.Table, err, lookErr, msg)
}

// missedByLog reports the rows a sweep published that were created while
// this session read the log, had never been tried, and that the log had
// not brought by the time it was read past them: rows a session wrote with
// sql_log_bin = 0, or in a binlog_format other than ROW (changed while the
// relay runs: the settings are checked at its start only). Logged at WARN
// and named on readiness (degraded) until a sweep finds none.
func (p *pipeline) missedByLog(n int) {
	s := p.s
	if n == 0 {
		s.missed.Store(nil)
		return
	}
	were, them := "were", "them"
	if n == 1 {
		were, them = "was", "it"
	}
	text := fmt.Sprintf("%s committed while the relay read the binary log %s not in it, or not readable there (a session with sql_log_bin = 0, or binlog_format not ROW for it?): the sweep published %s, in id order, not in commit order", outbox.Count(n, "row"), were, them)
	s.logger.Warn(text)
	s.missed.Store(&text)
}
