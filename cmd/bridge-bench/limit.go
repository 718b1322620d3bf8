package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// limitRun is what the limit phase measured.
type limitRun struct {
	// MsgsPerS is what JetStream accepted on this machine, the ceiling for
	// any relay.
	MsgsPerS float64
	// PublisherCPU and NATSCPU are the CPU time (user+system) of this
	// process, which only publishes, and of the local processes named
	// nats-server, over the phase; both zero when the nats-server runs in
	// this process (--nats-url not given), where they cannot be told apart.
	// PublisherCPU is the floor of any relay built on nats.go: what the
	// client spends to publish a message and read its PubAck, before a row
	// is read or marked.
	PublisherCPU, NATSCPU time.Duration
}

// limit publishes N messages straight to a stream, asynchronously, each with
// a distinct Nats-Msg-Id, and returns the rate and, with an external
// nats-server, the CPU of each side.
func (e *env) limit(ctx context.Context) (limitRun, error) {
	var run limitRun
	name, prefix, err := e.stream(ctx, "limit")
	if err != nil {
		return run, err
	}
	defer e.deleteStream(name)
	progress("limit: publishing %d messages of %d B to %s", e.s.Rows, e.s.PayloadBytes, name)
	external := e.s.NATSURL != ""
	var self0, nats0 time.Duration
	if external {
		self0, nats0 = cpuOfSelf(), cpuOfCommands("nats-server")
	}
	start := time.Now()
	for i := range e.s.Rows {
		m := nats.NewMsg(prefix + "." + strconv.Itoa(i%16))
		m.Data = e.payload
		m.Header.Set(jetstream.MsgIDHeader, "limit-"+strconv.Itoa(i))
		// With 4,096 PubAcks pending a publish waits for room: up to
		// 30 s, not the client's default 200 ms, which on the loaded
		// 2-core machine with R3 streams failed the phase ("stalled
		// with too many outstanding async published messages") when
		// the servers paused; the wait counts in the rate.
		if _, err := e.js.PublishMsgAsync(m, jetstream.WithStallWait(30*time.Second)); err != nil {
			return run, fmt.Errorf("publish %d: %w", i, err)
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-ctx.Done():
		return run, ctx.Err()
	case <-time.After(2 * time.Minute):
		return run, fmt.Errorf("%d PubAcks still pending after 2m", e.js.PublishAsyncPending())
	}
	elapsed := time.Since(start)
	if external {
		run.PublisherCPU, run.NATSCPU = cpuOfSelf()-self0, cpuOfCommands("nats-server")-nats0
	}
	info, err := e.js.Stream(ctx, name)
	if err != nil {
		return run, err
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(e.s.Rows) {
		return run, fmt.Errorf("stream holds %d messages, published %d", got, e.s.Rows)
	}
	run.MsgsPerS = float64(e.s.Rows) / elapsed.Seconds()
	if external {
		progress("limit: %.0f msg/s, CPU per message: publisher (nats.go) %.1f µs, NATS %.1f µs",
			run.MsgsPerS, usPerRow(run.PublisherCPU, e.s.Rows), usPerRow(run.NATSCPU, e.s.Rows))
	} else {
		progress("limit: %.0f msg/s", run.MsgsPerS)
	}
	return run, nil
}
