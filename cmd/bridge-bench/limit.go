package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// limit publishes N messages straight to a stream, asynchronously, each with
// a distinct Nats-Msg-Id, and returns messages per second: what JetStream
// accepts on this machine, the ceiling for any relay.
func (e *env) limit(ctx context.Context) (float64, error) {
	name, prefix, err := e.stream(ctx, "limit")
	if err != nil {
		return 0, err
	}
	defer e.deleteStream(name)
	progress("limit: publishing %d messages of %d B to %s", e.s.Rows, e.s.PayloadBytes, name)
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
			return 0, fmt.Errorf("publish %d: %w", i, err)
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("%d PubAcks still pending after 2m", e.js.PublishAsyncPending())
	}
	elapsed := time.Since(start)
	info, err := e.js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(e.s.Rows) {
		return 0, fmt.Errorf("stream holds %d messages, published %d", got, e.s.Rows)
	}
	rate := float64(e.s.Rows) / elapsed.Seconds()
	progress("limit: %.0f msg/s", rate)
	return rate, nil
}
