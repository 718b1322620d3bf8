package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// tablesRun is one run of the tables phase: the phase's rows in Tables
// tables (1, or --tables-count with the rows spread evenly), relayed by
// one relay over them (database.tables, a pattern). Rows per second from
// the first claim to the last mark of any of the tables (database clock);
// CPU per row as in bridgeRun.
type tablesRun struct {
	Tables              int      `json:"tables"`
	RowsPerS            float64  `json:"rows_per_s"`
	RelayCPUUsPerRow    float64  `json:"relay_cpu_us_per_row"`
	NATSCPUUsPerRow     float64  `json:"nats_cpu_us_per_row"`
	DatabaseCPUUsPerRow *float64 `json:"database_cpu_us_per_row,omitempty"`
}

// tablesResult is what the tables phase measures: runs over one table and
// over many in turn (one, many, one, many, …), and the ratio of the
// median rate over many tables to the median over one, in the same run.
type tablesResult struct {
	Runs  []tablesRun `json:"runs"`
	Ratio float64     `json:"ratio_many_to_one"`
}

// manyTables runs the tables phase: --tables-rounds rounds of a run over one
// table then a run over --tables-count tables, the same --n rows each.
func (e *env) manyTables(ctx context.Context) (tablesResult, error) {
	var res tablesResult
	var one, many []float64
	for round := range e.s.TablesRounds {
		for _, count := range []int{1, e.s.TablesCount} {
			r, err := e.tablesRun(ctx, round, count)
			if err != nil {
				return res, fmt.Errorf("%d table(s): %w", count, err)
			}
			res.Runs = append(res.Runs, r)
			if count == 1 {
				one = append(one, r.RowsPerS)
			} else {
				many = append(many, r.RowsPerS)
			}
		}
	}
	res.Ratio = median(many) / median(one)
	progress("tables: %d tables relay %.2f× the rows per second of one table (medians of %d rounds)", e.s.TablesCount, res.Ratio, e.s.TablesRounds)
	return res, nil
}

// tablesRun fills count tables with --n rows between them and times one
// relay over them, started on the pattern that matches them.
func (e *env) tablesRun(ctx context.Context, round, count int) (tablesRun, error) {
	r := tablesRun{Tables: count}
	phase := fmt.Sprintf("tables%d_%d", round+1, count)
	name, prefix, err := e.stream(ctx, phase)
	if err != nil {
		return r, err
	}
	defer e.deleteStream(name)
	stores := make([]*outbox.Store, count)
	for i := range count {
		if stores[i], err = e.table(ctx, fmt.Sprintf("%s_%03d", phase, i)); err != nil {
			return r, err
		}
		defer e.dropTable(stores[i].Table())
	}
	pattern := stores[0].Table()
	if count > 1 {
		pattern = pattern[:len(pattern)-len("000")] + "*"
	}
	per := e.s.Rows / count
	progress("tables: committing %d rows to each of %d table(s)", per, count)
	for i, s := range stores {
		if err := e.fill(ctx, s, fmt.Sprintf("%s.t%d", prefix, i), per); err != nil {
			return r, err
		}
	}
	meter := newCPUMeter(e.dbURL, e.s.NATSURL == "")
	children, err := e.startRelays(pattern, 1, meter)
	if err != nil {
		return r, err
	}
	err = waitStream(ctx, e, name, per*count, children)
	if err == nil {
		for _, s := range stores {
			if err = waitDone(ctx, s, per, "tables", children); err != nil {
				break
			}
		}
	}
	meter.stop()
	_, stopErr := stopAll(children)
	if err = errors.Join(err, stopErr); err != nil {
		return r, err
	}
	var first, last time.Time
	for _, s := range stores {
		a, b, err := spanTimes(ctx, s, "first_claimed_at")
		if err != nil {
			return r, err
		}
		if first.IsZero() || a.Before(first) {
			first = a
		}
		if b.After(last) {
			last = b
		}
	}
	rows := per * count
	r.RowsPerS = float64(rows) / last.Sub(first).Seconds()
	r.RelayCPUUsPerRow, r.NATSCPUUsPerRow = usPerRow(meter.relayTotal, rows), usPerRow(meter.natsTotal, rows)
	if meter.db != nil {
		v := usPerRow(meter.dbTotal, rows)
		r.DatabaseCPUUsPerRow = &v
	}
	progress("tables: %d table(s): %.0f rows/s, CPU per row: relay %.1f µs, database %s, NATS %.1f µs",
		count, r.RowsPerS, r.RelayCPUUsPerRow, meter.dbText(rows), r.NATSCPUUsPerRow)
	return r, nil
}

// waitStream polls every 100 ms until stream holds n messages.
func waitStream(ctx context.Context, e *env, stream string, n int, relays []*child) error {
	last := time.Now()
	for {
		info, err := e.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		got := info.CachedInfo().State.Msgs
		if got >= uint64(n) {
			return nil
		}
		if err := firstErr(relays); err != nil {
			return err
		}
		if time.Since(last) > 2*time.Second {
			progress("tables: %d of %d rows in the stream", got, n)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
