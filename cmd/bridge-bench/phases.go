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
	rate   float64 // rows per second, first claim to last mark
	rssMiB float64 // the largest peak RSS among the relays
	cpu    *cpuMeter
}

// bridge commits N rows, then lets --relays relays drain them, each in a
// child process, started together. It returns rows per second from the
// first claim to the last mark (database clock), the relays' largest peak
// RSS, and the CPU time the relays, the database and NATS spent meanwhile.
func (e *env) bridge(ctx context.Context) (bridgeResult, error) {
	var res bridgeResult
	name, prefix, err := e.stream(ctx, "bench")
	if err != nil {
		return res, err
	}
	defer e.deleteStream(name)
	store, err := e.table(ctx, "bridge")
	if err != nil {
		return res, err
	}
	progress("bridge: committing %d rows to %s", e.s.Rows, store.Table())
	if err := e.fill(ctx, store, prefix, e.s.Rows); err != nil {
		return res, err
	}
	progress("bridge: relaying with %d relay(s)", e.s.Relays)
	res.cpu = newCPUMeter(e.dbURL, e.s.NATSURL == "")
	relays, err := e.startRelays(store.Table(), e.s.Relays, res.cpu)
	if err != nil {
		return res, err
	}
	started := time.Now()
	var d time.Duration
	if e.s.DeleteOnRelay {
		// Deleted rows leave no timestamps: time from the relays' start to
		// the first poll that finds the table empty, on this clock.
		err = waitEmpty(ctx, store, e.s.Rows, relays)
		d = time.Since(started)
	} else {
		err = waitDone(ctx, store, e.s.Rows, "bridge", relays)
	}
	res.cpu.stop()
	peakKiB, stopErr := stopAll(relays)
	if err = errors.Join(err, stopErr); err != nil {
		return res, err
	}
	if !e.s.DeleteOnRelay {
		if d, err = span(ctx, store, e.s.Source == "postgres-wal"); err != nil {
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
	progress("bridge: %.0f rows/s, peak RSS %.1f MiB, CPU per row: relay %.1f µs, database %s, NATS %.1f µs",
		res.rate, res.rssMiB, usPerRow(res.cpu.relayTotal, e.s.Rows), res.cpu.dbText(e.s.Rows), usPerRow(res.cpu.natsTotal, e.s.Rows))
	return res, nil
}

type latencies []time.Duration

// quantile returns the q-quantile in milliseconds (nearest rank).
func (l latencies) quantile(q float64) float64 {
	if len(l) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(l)))) - 1
	return float64(l[max(i, 0)]) / float64(time.Millisecond)
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
func (e *env) latency(ctx context.Context, phase string, rate, perCommit int) (latencies, error) {
	name, prefix, err := e.stream(ctx, phase)
	if err != nil {
		return nil, err
	}
	defer e.deleteStream(name)
	store, err := e.table(ctx, phase)
	if err != nil {
		return nil, err
	}
	c, err := e.startRelay(store.Table())
	if err != nil {
		return nil, err
	}
	defer func() { _, _ = c.stop() }()

	insert := `INSERT INTO ` + store.Table() + ` (idempotency_key, subject, payload) VALUES ($1, $2, $3)`
	if e.db.Dialect() != outbox.DialectPostgres {
		insert = `INSERT INTO ` + store.Table() + ` (idempotency_key, subject, payload) VALUES (?, ?, ?)`
	}
	stmt, err := e.db.SQL.PrepareContext(ctx, insert)
	if err != nil {
		return nil, err
	}
	defer stmt.Close()

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
		return nil, err
	}
	if achieved := float64(total) / time.Since(begin).Seconds(); achieved < 0.95*float64(rate) {
		progress("%s: the producers committed only %.0f rows/s of %d", phase, achieved, rate)
	}
	if err := waitDone(ctx, store, total, phase, []*child{c}); err != nil {
		return nil, err
	}

	stream, err := e.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	out := make(latencies, 0, total)
	for len(out) < total {
		batch, err := cons.Fetch(min(1000, total-len(out)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			key := m.Headers().Get("Outbox-Idempotency-Key")
			i, err := strconv.Atoi(strings.TrimPrefix(key, "l-"))
			if err != nil || i < 0 || i >= total {
				return nil, fmt.Errorf("message %s was not committed by the producer", m.Headers().Get(jetstream.MsgIDHeader))
			}
			out = append(out, meta.Timestamp.Sub(committed[i]))
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
	}
	slices.Sort(out)
	progress("%s: p50 %.2f ms, p99 %.2f ms", phase, out.quantile(0.5), out.quantile(0.99))
	return out, nil
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
