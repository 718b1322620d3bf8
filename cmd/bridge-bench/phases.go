package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// bridge commits N rows, then lets a relay drain them. It returns rows per
// second from the first claim to the last mark (database clock) and the
// relay's peak RSS in MiB.
func (e *env) bridge(ctx context.Context) (rate, rssMiB float64, err error) {
	name, prefix, err := e.stream(ctx, "bench")
	if err != nil {
		return 0, 0, err
	}
	defer e.deleteStream(name)
	store, err := e.table(ctx, "bridge")
	if err != nil {
		return 0, 0, err
	}
	progress("bridge: committing %d rows to %s", e.s.Rows, store.Table())
	if err := e.fill(ctx, store, prefix, e.s.Rows); err != nil {
		return 0, 0, err
	}
	progress("bridge: relaying")
	c, err := e.startRelay(store.Table())
	if err != nil {
		return 0, 0, err
	}
	started := time.Now()
	var d time.Duration
	if e.s.DeleteOnRelay {
		// Deleted rows leave no timestamps: time from the relay's start to
		// the first poll that finds the table empty, on this clock.
		err = waitEmpty(ctx, store, e.s.Rows, c)
		d = time.Since(started)
	} else {
		err = waitDone(ctx, store, e.s.Rows, "bridge", c)
	}
	if err != nil {
		_, _ = c.stop()
		return 0, 0, err
	}
	report, err := c.stop()
	if err != nil {
		return 0, 0, err
	}
	if !e.s.DeleteOnRelay {
		if d, err = span(ctx, store, e.s.Source == "postgres-wal"); err != nil {
			return 0, 0, err
		}
	}
	info, err := e.js.Stream(ctx, name)
	if err != nil {
		return 0, 0, err
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(e.s.Rows) {
		return 0, 0, fmt.Errorf("stream holds %d messages for %d rows", got, e.s.Rows)
	}
	rate = float64(e.s.Rows) / d.Seconds()
	rssMiB = float64(report.PeakRSSKiB) / 1024
	progress("bridge: %.0f rows/s, peak RSS %.1f MiB", rate, rssMiB)
	return rate, rssMiB, nil
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

// latency runs a relay while a producer commits Rate rows/s, one row per
// transaction, for Duration; per row it measures the time from the
// producer's commit to JetStream storing the message (the stream's
// timestamp, taken when the server stores it and answers the PubAck).
func (e *env) latency(ctx context.Context) (latencies, error) {
	name, prefix, err := e.stream(ctx, "lat")
	if err != nil {
		return nil, err
	}
	defer e.deleteStream(name)
	store, err := e.table(ctx, "latency")
	if err != nil {
		return nil, err
	}
	c, err := e.startRelay(store.Table())
	if err != nil {
		return nil, err
	}
	defer func() { _, _ = c.stop() }()

	insert := `INSERT INTO ` + store.Table() + ` (idempotency_key, subject, payload) VALUES ($1, $2, $3)`
	if e.db.Dialect() != "postgres" {
		insert = `INSERT INTO ` + store.Table() + ` (idempotency_key, subject, payload) VALUES (?, ?, ?)`
	}
	stmt, err := e.db.SQL.PrepareContext(ctx, insert)
	if err != nil {
		return nil, err
	}
	defer stmt.Close()

	progress("latency: committing %d rows/s for %s", e.s.Rate, e.s.Duration)
	total := int(float64(e.s.Rate) * e.s.Duration.Seconds())
	committed := make(map[string]time.Time, total)
	tick := time.NewTicker(time.Second / time.Duration(e.s.Rate))
	defer tick.Stop()
	for i := range total {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		key := "l-" + strconv.Itoa(i)
		if _, err := stmt.ExecContext(ctx, key, prefix+".x", e.payload); err != nil {
			return nil, err
		}
		committed[key] = time.Now()
	}
	if err := waitDone(ctx, store, total, "latency", c); err != nil {
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
			at, ok := committed[m.Headers().Get("Outbox-Idempotency-Key")]
			if !ok {
				return nil, fmt.Errorf("message %s was not committed by the producer", m.Headers().Get(jetstream.MsgIDHeader))
			}
			out = append(out, meta.Timestamp.Sub(at))
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
	}
	slices.Sort(out)
	progress("latency: p50 %.2f ms, p99 %.2f ms", out.quantile(0.5), out.quantile(0.99))
	return out, nil
}
