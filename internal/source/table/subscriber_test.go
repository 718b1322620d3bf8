package table_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/source/table"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

var (
	enqueue         = bridgetest.Enqueue
	get             = bridgetest.ReadRow
	kinds           = bridgetest.Kinds
	onEveryDatabase = bridgetest.OnEveryDatabase
	claimIDs        = bridgetest.ClaimIDs
	enqueuePayload  = bridgetest.EnqueuePayload
)

// setup returns a fresh, migrated outbox table of kind.
func setup(t *testing.T, kind string) *outbox.Store {
	t.Helper()
	_, _, store := bridgetest.Outbox(t, kind)
	return store
}

// untilMarked returns once cond holds, asking it after each write of marks
// by sub (which runSubscriber or MarkSignal enabled): what it reads
// changes only then.
func untilMarked(t *testing.T, sub *table.Subscriber, cond func() bool, what ...any) {
	t.Helper()
	table.Marks(sub).WaitUntil(t, cond, what...)
}

// handler drives a Subscriber the way the forwarder does, deciding per
// delivery (row) of each message.
func runSubscriber(t *testing.T, s *outbox.Store, cfg table.SubscriberConfig, handle func(*source.Delivery), enable ...func(*table.Subscriber)) *table.Subscriber {
	t.Helper()
	cfg.Owner = "relay-test"
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	sub, err := table.NewSubscriber(s, slog.New(slog.NewTextHandler(io.Discard, nil)), cfg)
	require.NoError(t, err)
	table.MarkSignal(sub)
	for _, f := range enable {
		f(sub)
	}
	msgs, err := sub.Subscribe(context.Background(), s.Table())
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			b := source.BatchOf(m)
			for i := range b.Len() {
				go handle(b.At(i))
			}
		}
	}()
	t.Cleanup(func() {
		require.NoError(t, sub.Close())
		<-done
	})
	return sub
}

func TestSubscriberBacksOffThenDeadLetters(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := setup(t, kind)
			id := enqueue(t, s, "k", "")
			sub := runSubscriber(t, s, table.SubscriberConfig{MaxAttempts: 3, BackoffInitial: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond},
				func(d *source.Delivery) {
					d.Report(source.Failed(errors.New("no responders: stream offline"), source.Retryable))
				})
			untilMarked(t, sub, func() bool { return get(t, s, id).Status == "permanent_failed" })
			r := get(t, s, id)
			require.Equal(t, 3, r.Attempts)
			require.Contains(t, r.LastError.String, "gave up after 3 attempts")
			require.Contains(t, r.LastError.String, "stream offline")
		})
	}
}

func TestSubscriberSettlesOnAckDeadline(t *testing.T) {
	onEveryDatabase(t, subscriberSettlesOnAckDeadline)
}

func subscriberSettlesOnAckDeadline(t *testing.T, kind string) {
	s := setup(t, kind)
	id := enqueue(t, s, "k", "")
	sub := runSubscriber(t, s, table.SubscriberConfig{AckDeadline: 50 * time.Millisecond, BackoffInitial: time.Hour, BackoffMax: time.Hour},
		func(d *source.Delivery) { _ = d.Handover() }) // hands it to NATS (as the forwarder does), never acks
	untilMarked(t, sub, func() bool { return get(t, s, id).Status == "failed" })
	require.Contains(t, get(t, s, id).LastError.String, "ack deadline")
	require.Equal(t, 1, get(t, s, id).Attempts, "sent, its outcome unknown: the attempt counts")
}

// TestSubscriberGivesBackARowNotHandedOverByItsDeadline: a row still
// waiting its hand-over to NATS at its ack deadline (a long batch ahead of
// it in the forwarder) is settled without counting the attempt, and the
// forwarder may not send it afterwards (Handover refuses it).
func TestSubscriberGivesBackARowNotHandedOverByItsDeadline(t *testing.T) {
	onEveryDatabase(t, subscriberGivesBackARowNotHandedOverByItsDeadline)
}

func subscriberGivesBackARowNotHandedOverByItsDeadline(t *testing.T, kind string) {
	s := setup(t, kind)
	id := enqueue(t, s, "k", "")
	refused := make(chan error, 1)
	deadlinePassed := make(chan struct{})
	var calls atomic.Int32
	sub := runSubscriber(t, s, table.SubscriberConfig{AckDeadline: 50 * time.Millisecond, MaxAttempts: 1},
		func(d *source.Delivery) {
			if calls.Add(1) == 1 {
				<-deadlinePassed // its turn comes after the deadline
				refused <- d.Handover()
				return
			}
			if d.Handover() == nil { // claimed again: sent, published
				d.Report(source.Published("S", 1, false))
			}
		})
	// The watcher gave the row back at its ack deadline (attempt refunded).
	untilMarked(t, sub, func() bool { return sub.Counters.Released.Load() >= 1 }, "the row given back at its deadline")
	close(deadlinePassed)
	require.ErrorIs(t, <-refused, source.ErrPublishDeadline)
	untilMarked(t, sub, func() bool { st := get(t, s, id).Status; return st == "done" || st == "permanent_failed" })
	r := get(t, s, id)
	require.Equal(t, "done", r.Status, "no dead letter with max_attempts 1: %s", r.LastError.String)
	require.Equal(t, 1, r.Attempts, "the attempt it was not sent is not counted")
}

// TestSubscriberSettlesBehindASlowMessage holds back the first message of
// a claimed batch and acks the others: they are marked done while the
// first is still awaiting its outcome, not after it.
func TestSubscriberSettlesBehindASlowMessage(t *testing.T) {
	onEveryDatabase(t, subscriberSettlesBehindASlowMessage)
}

func subscriberSettlesBehindASlowMessage(t *testing.T, kind string) {
	s := setup(t, kind)
	ids := make([]int64, 10)
	for i := range ids {
		ids[i] = enqueue(t, s, fmt.Sprint("k", i), "")
	}
	release := make(chan struct{})
	sub := runSubscriber(t, s, table.SubscriberConfig{BatchSize: 10}, func(d *source.Delivery) {
		if d.Msg.Header.Get(outbox.HeaderID) == fmt.Sprint(ids[0]) {
			<-release
		}
		d.Report(source.Published("S", 1, false))
	})
	untilMarked(t, sub, func() bool {
		for _, id := range ids[1:] {
			if get(t, s, id).Status != "done" {
				return false
			}
		}
		return true
	}, "the acked messages behind the slow one were not settled")
	require.Equal(t, "in_flight", get(t, s, ids[0]).Status)
	close(release)
	untilMarked(t, sub, func() bool { return get(t, s, ids[0]).Status == "done" })
}

func TestSubscriberRefundsUnavailable(t *testing.T) { onEveryDatabase(t, subscriberRefundsUnavailable) }

func subscriberRefundsUnavailable(t *testing.T, kind string) {
	s := setup(t, kind)
	id := enqueue(t, s, "k", "")
	nacks := make(chan struct{}, 100)
	sub := runSubscriber(t, s, table.SubscriberConfig{MaxAttempts: 2}, func(d *source.Delivery) {
		if len(nacks) < 5 {
			nacks <- struct{}{}
			d.Report(source.Failed(errors.New("nats: server is disconnected"), source.Unavailable))
			return
		}
		d.Report(source.Published("S", 1, false))
	})
	untilMarked(t, sub, func() bool { return get(t, s, id).Status == "done" })
	require.Equal(t, 1, get(t, s, id).Attempts, "five unavailable attempts did not count against max_attempts 2")
	require.Equal(t, int64(5), sub.Counters.Released.Load())
}

func TestSubscriberDrainsOnClose(t *testing.T) { onEveryDatabase(t, subscriberDrainsOnClose) }

func subscriberDrainsOnClose(t *testing.T, kind string) {
	s := setup(t, kind)
	for i := range 50 {
		enqueue(t, s, fmt.Sprint("k", i), "")
	}
	sub, err := table.NewSubscriber(s, slog.New(slog.NewTextHandler(io.Discard, nil)), table.SubscriberConfig{
		Owner: "r", MaxInFlight: 10,
	})
	require.NoError(t, err)
	// The drain gives up when the test says, not after a DrainTimeout
	// that a slow machine could pass before the five acks are written.
	draining, expire := table.DrainSignal(sub), table.ManualDrain(sub)
	table.MarkSignal(sub)
	msgs, err := sub.Subscribe(context.Background(), "outbox")
	require.NoError(t, err)
	var got []*source.Delivery
	for len(got) < 10 {
		b := source.BatchOf(<-msgs)
		for i := range b.Len() {
			got = append(got, b.At(i))
		}
	}
	closed := make(chan error)
	go func() { closed <- sub.Close() }()
	// Five finish during the drain; five never do and are released when
	// it gives up.
	draining.Wait(t)
	for _, d := range got[:5] {
		d.Report(source.Published("S", 1, false))
	}
	untilMarked(t, sub, func() bool { return sub.Counters.Relayed.Load() == 5 }, "the five acked during the drain were not settled")
	expire()
	// A tick may have emitted one more batch just before Close began;
	// such messages are nacked like any the router would fail.
	for m := range msgs {
		b := source.BatchOf(m)
		for i := range b.Len() {
			b.At(i).Report(source.Failed(errors.New("late"), source.Retryable))
		}
		m.Nack()
	}
	require.NoError(t, <-closed)
	st, err := s.Stats(context.Background(), 0)
	require.NoError(t, err)
	require.Equal(t, int64(5), st.Rows[outbox.StatusDone])
	require.Zero(t, st.Rows[outbox.StatusInFlight], "nothing left in flight")
	require.Equal(t, int64(45), st.Rows[outbox.StatusPending]+st.Rows[outbox.StatusFailed])
}

// TestSubscriberBoundsBytesInFlight: with rows of 1,000 bytes and
// MaxInFlightBytes of 3,000, the subscriber never has more messages out
// than fit, plus the one row a claim always takes; acked, they make room
// for the rest.
func TestSubscriberBoundsBytesInFlight(t *testing.T) {
	onEveryDatabase(t, subscriberBoundsBytesInFlight)
}

func subscriberBoundsBytesInFlight(t *testing.T, kind string) {
	s := setup(t, kind)
	const rows = 12
	for i := range rows {
		enqueuePayload(t, s, fmt.Sprint("k", i), 1000)
	}
	var mu sync.Mutex
	var held []*source.Delivery
	most := 0
	arrived := make(chan struct{}, rows)
	var claims *source.TestSignal[int]
	sub := runSubscriber(t, s, table.SubscriberConfig{MaxInFlightBytes: 3000}, func(d *source.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		held = append(held, d)
		most = max(most, len(held))
		arrived <- struct{}{}
	}, func(sub *table.Subscriber) { claims = table.ClaimSignal(sub) })
	release := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := len(held)
		for _, d := range held {
			d.Report(source.Published("S", 1, false))
		}
		held = nil
		return n
	}
	heldNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(held)
	}
	// Each round waits until the claimer has taken all the bound allows (a
	// tick that took nothing: the window is full, or the table empty) and
	// every row it claimed has reached the handler, then acks them.
	for done := 0; done < rows; done += release() {
		for claims.Wait(t) != 0 {
		}
		for heldNow() < int(sub.Counters.Claimed.Load())-done {
			select {
			case <-arrived:
			case <-time.After(source.TestSignalTimeout):
				t.Fatalf("%d claimed rows did not reach the handler", int(sub.Counters.Claimed.Load())-done-heldNow())
			}
		}
	}
	require.LessOrEqual(t, most, 3, "messages out at once: two fit 3,000 bytes (with their headers), and a claim with room left takes one more")
	require.GreaterOrEqual(t, most, 2)
}

// TestSubscriberDeadLettersFromLength: a row whose payload cannot fit the
// server's max_payload becomes a dead letter without being emitted, and
// without its payload being read.
func TestSubscriberDeadLettersFromLength(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := setup(t, kind)
			const maxPayload = 4096
			over := enqueuePayload(t, s, "over", maxPayload-int(outbox.RelayHeaderMinBytes)+1)
			fits := enqueuePayload(t, s, "fits", 100)
			emitted := make(chan string, 10)
			sub := runSubscriber(t, s, table.SubscriberConfig{MaxPayload: func() int64 { return maxPayload }}, func(d *source.Delivery) {
				emitted <- d.Msg.Header.Get(outbox.HeaderIdempotencyKey)
				d.Report(source.Published("S", 1, false))
			})
			untilMarked(t, sub, func() bool { return get(t, s, over).Status == "permanent_failed" && get(t, s, fits).Status == "done" })
			require.Equal(t, "fits", <-emitted)
			require.Empty(t, emitted, "the row over max_payload was never emitted")
			lastError := get(t, s, over).LastError.String
			require.Contains(t, lastError, "max_payload of 4096 bytes")
			require.Contains(t, lastError, "the payload was not read")
		})
	}
}
