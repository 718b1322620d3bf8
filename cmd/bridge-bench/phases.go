package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// bridgeResult is what the bridge phase measures.
type bridgeResult struct {
	rate        float64 // rows per second, first claim to last mark
	rssMiB      float64 // the largest peak RSS among the relays
	cpu         *cpuMeter
	checkpoints *int64 // PostgreSQL's checkpoints during the drain; nil elsewhere
}

// bridgeRun is one bridge phase of a run, for one --relays count: what the
// JSON output's bridge_runs holds. CPU per row as in results; the ratios
// are to the limit phase of the same run (absent without it), to the run
// of results.BridgeScalingBaseRelays relays, and of the relays' CPU to
// nats-server's. The shares are of the machine's cores over the
// measurement (from the relays' start to the poll that found the last
// row marked, up to a second after it), in per cent: all of its busy
// time, and that of the relays, NATS (this process with the in-process
// servers) and the database server (absent where not measured).
type bridgeRun struct {
	Relays               int      `json:"relays"`
	RowsPerS             float64  `json:"rows_per_s"`
	RatioLimit           float64  `json:"ratio_limit,omitempty"`
	Scaling              float64  `json:"scaling"`
	RelayCPUUsPerRow     float64  `json:"relay_cpu_us_per_row"`
	NATSCPUUsPerRow      float64  `json:"nats_cpu_us_per_row"`
	DatabaseCPUUsPerRow  *float64 `json:"database_cpu_us_per_row,omitempty"`
	RatioRelayNATSCPU    float64  `json:"ratio_relay_nats_cpu,omitempty"`
	PeakRSSMiB           float64  `json:"peak_rss_mib"`
	MachineBusyPct       float64  `json:"machine_busy_pct,omitempty"`
	RelayPctOfMachine    float64  `json:"relay_pct_of_machine,omitempty"`
	NATSPctOfMachine     float64  `json:"nats_pct_of_machine,omitempty"`
	DatabasePctOfMachine *float64 `json:"database_pct_of_machine,omitempty"`
	Cores                int      `json:"cores,omitempty"`
	Checkpoints          *int64   `json:"checkpoints,omitempty"`
}

// run is the bridgeRun of relays relays over rows rows; the ratios to the
// limit and the base run are set by the caller.
func (b bridgeResult) run(relays, rows int) bridgeRun {
	r := bridgeRun{
		Relays: relays, RowsPerS: b.rate, PeakRSSMiB: b.rssMiB,
		RelayCPUUsPerRow: usPerRow(b.cpu.relayTotal, rows), NATSCPUUsPerRow: usPerRow(b.cpu.natsTotal, rows),
		MachineBusyPct: b.cpu.machinePct(b.cpu.machineBusy), RelayPctOfMachine: b.cpu.machinePct(b.cpu.relayTotal),
		NATSPctOfMachine: b.cpu.machinePct(b.cpu.natsTotal), Cores: b.cpu.cores, Checkpoints: b.checkpoints,
	}
	if b.cpu.natsTotal > 0 {
		r.RatioRelayNATSCPU = b.cpu.relayTotal.Seconds() / b.cpu.natsTotal.Seconds()
	}
	if b.cpu.db != nil {
		v := usPerRow(b.cpu.dbTotal, rows)
		r.DatabaseCPUUsPerRow = &v
		if r.Cores > 0 {
			pct := b.cpu.machinePct(b.cpu.dbTotal)
			r.DatabasePctOfMachine = &pct
		}
	}
	return r
}

// bridge commits N rows to a fresh table, then lets relays relays drain
// them, each in a child process, started together. It returns rows per
// second from the first claim to the last mark (database clock), the
// relays' largest peak RSS, and the CPU time the relays, the database and
// NATS spent meanwhile. Run i of a run (one per --relays count) has a
// table and a stream of its own; the table is dropped afterwards, so that
// its dead rows are not vacuumed during the next run.
func (e *env) bridge(ctx context.Context, i, relays int) (bridgeResult, error) {
	var res bridgeResult
	streamPhase, tablePhase := "bench", "bridge"
	if i > 0 {
		streamPhase, tablePhase = fmt.Sprintf("bench_run%d", i+1), fmt.Sprintf("bridge_run%d", i+1)
	}
	name, prefix, err := e.stream(ctx, streamPhase)
	if err != nil {
		return res, err
	}
	defer e.deleteStream(name)
	store, err := e.table(ctx, tablePhase)
	if err != nil {
		return res, err
	}
	defer e.dropTable(store.Table())
	if e.db.Dialect() == outbox.DialectPostgres {
		// As the database phase does: the pages the fill writes after a
		// checkpoint carry no full-page images into the drain's WAL,
		// unless another checkpoint starts (counted below), and no run
		// inherits the dirty pages of the one before.
		if _, err := e.db.SQL.ExecContext(ctx, "CHECKPOINT"); err != nil {
			progress("bridge: CHECKPOINT before the fill refused (%v)", err)
		}
	}
	progress("bridge: committing %d rows to %s", e.s.Rows, store.Table())
	fill := e.fill
	if e.s.RowsPerCommit > 0 {
		fill = e.fillByCommits
	}
	if err := fill(ctx, store, prefix, e.s.Rows); err != nil {
		return res, err
	}
	progress("bridge: relaying with %d relay(s)", relays)
	ckpt0, ckptErr := e.checkpoints(ctx)
	res.cpu = newCPUMeter(e.dbURL, e.s.NATSURL == "")
	children, err := e.startRelays(store.Table(), relays, res.cpu)
	if err != nil {
		return res, err
	}
	started := time.Now()
	var d time.Duration
	if e.s.DeleteOnRelay {
		// Deleted rows leave no timestamps: time from the relays' start to
		// the first poll that finds the table empty, on this clock.
		err = waitEmpty(ctx, store, e.s.Rows, children)
		d = time.Since(started)
	} else {
		err = waitDone(ctx, store, e.s.Rows, "bridge", children)
	}
	res.cpu.stop()
	peakKiB, stopErr := stopAll(children)
	if err = errors.Join(err, stopErr); err != nil {
		return res, err
	}
	if ckptErr == nil {
		if ckpt, err := e.checkpoints(ctx); err == nil {
			n := ckpt - ckpt0
			res.checkpoints = &n
		}
	}
	if !e.s.DeleteOnRelay {
		if d, err = span(ctx, store, logSource(e.s.Source)); err != nil {
			return res, err
		}
	}
	info, err := e.js.Stream(ctx, name)
	if err != nil {
		return res, err
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(e.s.Rows) {
		return res, fmt.Errorf("stream holds %d messages for %d rows", got, e.s.Rows)
	}
	res.rate = float64(e.s.Rows) / d.Seconds()
	res.rssMiB = float64(peakKiB) / 1024
	busy := ""
	if res.cpu.cores > 0 {
		busy = fmt.Sprintf(", machine %.0f %% busy", res.cpu.machinePct(res.cpu.machineBusy))
	}
	progress("bridge: %d relay(s): %.0f rows/s, peak RSS %.1f MiB, CPU per row: relay %.1f µs, database %s, NATS %.1f µs%s",
		relays, res.rate, res.rssMiB, usPerRow(res.cpu.relayTotal, e.s.Rows), res.cpu.dbText(e.s.Rows), usPerRow(res.cpu.natsTotal, e.s.Rows), busy)
	return res, nil
}

type latencies []time.Duration

// latencyRun is what a latency phase measured, each row's time from its
// transaction's commit to JetStream storing its message.
type latencyRun struct {
	// all holds every row's, sorted.
	all latencies
	// steady holds, sorted, those of the rows committed latencySettle or
	// more after the first: the relay's polls follow the rows by then.
	steady latencies
	// first is the first row's, committed after latencyQuiet without
	// rows: the wake-up of an idle relay, which waits up to
	// relay.poll_interval without notifications.
	first time.Duration
}

// latencyQuiet is how long a latency phase leaves the relay without rows
// before its first row (after the warm-up row is relayed): long enough for
// the relay's polls to relax to relay.poll_interval (about 3 × 250 ms, see
// table.nextPoll), so that every run starts from an idle relay.
const latencyQuiet = time.Second

// latencySettle is the start of a latency phase that its steady figures
// leave out: the first row waits for the idle relay's next poll, and the
// rows committed meanwhile wait with it.
const latencySettle = time.Second

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile returns the q-quantile in milliseconds (nearest rank).
func (l latencies) quantile(q float64) float64 {
	if len(l) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(l)))) - 1
	return ms(l[max(i, 0)])
}

// latency runs a relay while producers commit rate rows/s for Duration;
// per row it measures the time from its transaction's commit to JetStream
// storing the message (the stream's timestamp, taken when the server stores
// it and answers the PubAck). Above 500 rows/s the rows come from several
// producers, one connection each, so that one connection's round trips do
// not cap the rate. Each transaction holds perCommit rows: the 2-core
// machine, running the relay, NATS and PostgreSQL, commits only ~1,600
// single-row transactions per second from 20 producers, so latency-high
// commits 10 rows per transaction (--high-rows-per-commit).
//
// The relay first relays a warm-up row and is then left latencyQuiet
// without rows, so that every run starts as a service's first write after
// a quiet second does, from an idle relay: latencyRun tells the rows that
// waited for its wake-up from those that came after.
func (e *env) latency(ctx context.Context, phase string, rate, perCommit int) (latencyRun, error) {
	var run latencyRun
	name, prefix, err := e.stream(ctx, phase)
	if err != nil {
		return run, err
	}
	defer e.deleteStream(name)
	store, err := e.table(ctx, phase)
	if err != nil {
		return run, err
	}
	c, err := e.startRelay(store.Table())
	if err != nil {
		return run, err
	}
	defer func() { _, _ = c.stop() }()

	insert := `INSERT INTO ` + store.Table() + ` (idempotency_key, subject, payload) VALUES ($1, $2, $3)`
	if e.db.Dialect() != outbox.DialectPostgres {
		insert = `INSERT INTO ` + store.Table() + ` (idempotency_key, subject, payload) VALUES (?, ?, ?)`
	}
	stmt, err := e.db.SQL.PrepareContext(ctx, insert)
	if err != nil {
		return run, err
	}
	defer stmt.Close()

	// A warm-up row, relayed before the clock starts: what the relay does
	// once at its start (the log source's server finding its position in
	// the binary log, a first claim) is not a latency of the rows.
	if _, err := stmt.ExecContext(ctx, "warmup", prefix+".x", e.payload); err != nil {
		return run, err
	}
	if err := waitDone(ctx, store, 1, phase+" warm-up", []*child{c}); err != nil {
		return run, err
	}
	select {
	case <-ctx.Done():
		return run, ctx.Err()
	case <-time.After(latencyQuiet):
	}

	total := int(float64(rate) * e.s.Duration.Seconds())
	producers := max(1, min(rate/500, 32))
	if !e.db.Capabilities().ConcurrentWrites {
		producers = 1 // one writer at a time
	}
	progress("%s: committing %d rows/s for %s (%d producers, %d rows per transaction)", phase, rate, e.s.Duration, producers, perCommit)
	committed := make([]time.Time, total)
	interval := time.Second / time.Duration(rate)
	begin := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for p := range producers {
		g.Go(func() error {
			// Producer p commits the groups of perCommit rows p,
			// p+producers, …; group k (rows k×perCommit onward) at begin +
			// its first row × interval (later when it falls behind).
			for k := p; k*perCommit < total; k += producers {
				first, end := k*perCommit, min((k+1)*perCommit, total)
				if wait := time.Until(begin.Add(time.Duration(first) * interval)); wait > 0 {
					select {
					case <-gctx.Done():
						return gctx.Err()
					case <-time.After(wait):
					}
				}
				if err := commitRows(gctx, e.db.SQL, stmt, first, end, prefix+".x", e.payload); err != nil {
					return err
				}
				now := time.Now()
				for i := first; i < end; i++ {
					committed[i] = now
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return run, err
	}
	if achieved := float64(total) / time.Since(begin).Seconds(); achieved < 0.95*float64(rate) {
		progress("%s: the producers committed only %.0f rows/s of %d", phase, achieved, rate)
	}
	if err := waitDone(ctx, store, total+1, phase, []*child{c}); err != nil {
		return run, err
	}

	stream, err := e.js.Stream(ctx, name)
	if err != nil {
		return run, err
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return run, err
	}
	out := make(latencies, 0, total)
	settled := begin.Add(latencySettle)
	for len(out) < total {
		batch, err := cons.Fetch(min(1000, total-len(out)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return run, err
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return run, err
			}
			key := m.Headers().Get("Outbox-Idempotency-Key")
			if key == "warmup" {
				continue
			}
			i, err := strconv.Atoi(strings.TrimPrefix(key, "l-"))
			if err != nil || i < 0 || i >= total {
				return run, fmt.Errorf("message %s was not committed by the producer", m.Headers().Get(jetstream.MsgIDHeader))
			}
			l := meta.Timestamp.Sub(committed[i])
			out = append(out, l)
			if i == 0 {
				run.first = l
			}
			if !committed[i].Before(settled) {
				run.steady = append(run.steady, l)
			}
		}
		if err := batch.Error(); err != nil {
			return run, err
		}
	}
	slices.Sort(out)
	slices.Sort(run.steady)
	run.all = out
	progress("%s: p50 %.2f ms, p99 %.2f ms; after the first %s p50 %.2f ms, p99 %.2f ms; the first row %.2f ms", phase,
		out.quantile(0.5), out.quantile(0.99), latencySettle, run.steady.quantile(0.5), run.steady.quantile(0.99), ms(run.first))
	return run, nil
}

// commitRows inserts rows [first, end) with stmt: one autocommitted
// statement for a single row, one transaction otherwise.
func commitRows(ctx context.Context, db *sql.DB, stmt *sql.Stmt, first, end int, subject string, payload []byte) error {
	if end-first == 1 {
		_, err := stmt.ExecContext(ctx, "l-"+strconv.Itoa(first), subject, payload)
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	txStmt := tx.StmtContext(ctx, stmt)
	for i := first; i < end; i++ {
		if _, err := txStmt.ExecContext(ctx, "l-"+strconv.Itoa(i), subject, payload); err != nil {
			return err
		}
	}
	return tx.Commit()
}
