package forwarder_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/source/table"
)

// TestMessagePastItsPublishDeadlineIsNotSent: a claimed row's message held
// longer than relay.ack_deadline (a paused relay) is refused by the
// product's marshaler before it reaches the NATS client, and classed
// Unavailable so that its attempt is given back; a message on time is
// published. Without the check, a relay resumed after its lease expired
// sent rows that another relay had already published, and past the
// duplicate window the stream stored them twice, out of key order.
func TestMessagePastItsPublishDeadlineIsNotSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, store := bridgetest.Outbox(t, "sqlite")
	for _, key := range []string{"on-time", "late"} {
		_, err := store.Enqueue(ctx, outbox.Entry{IdempotencyKey: key, Subject: "events.deadline", Payload: []byte(key)})
		require.NoError(t, err)
	}
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	stream := bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	pub, err := sink.New(js, sink.Config{Marshaler: forwarder.NewPublisherMarshaler()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })

	const ackDeadline = time.Second // room for a loaded machine between the claim and the first publish
	sub, err := table.NewSubscriber(store, slog.New(slog.NewTextHandler(io.Discard, nil)),
		table.SubscriberConfig{Owner: "deadline-test", AckDeadline: ackDeadline, InflightTimeout: 2 * ackDeadline, PollInterval: 10 * time.Millisecond,
			BatchSize: 1}) // one row per message
	require.NoError(t, err)
	marks := source.NewTestSignal[int]()
	sub.Signals.Marked = marks
	msgs, err := sub.Subscribe(ctx, store.Table())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })

	// "on-time", then "late" (claimed in id order, one per claim): the
	// first is published as soon as it comes, before the second is
	// awaited (on a loaded machine the second claim can take longer than
	// the deadline).
	first := <-msgs
	_, err = pub.PublishMsg(ctx, source.Of(first).Subject, first)
	require.NoError(t, err, "a message on time is published")
	first.Ack()
	second := <-msgs

	// The relay "pauses" until the subscriber, at the ack deadline, has
	// given the row back (not sent: its attempt refunded).
	marks.WaitUntil(t, func() bool { return sub.Counters.Released.Load() == 1 }, "the late row given back at its deadline")
	_, err = pub.PublishMsg(ctx, source.Of(second).Subject, second)
	require.ErrorIs(t, err, source.ErrPublishDeadline)
	require.Equal(t, source.Unavailable, forwarder.Classify(err))
	second.Nack()

	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "only the message on time reached the stream")
	last, err := stream.GetLastMsgForSubject(ctx, "events.deadline")
	require.NoError(t, err)
	require.Equal(t, "on-time", string(last.Data))
}

// TestRowsNotHandedOverByTheirDeadlineAreGivenBack: one claimed batch
// whose hand-over to the NATS client outlasts relay.ack_deadline (here the
// forwarder stalls on its 11th row, as a large batch of large payloads on
// a slow link does). At the deadline the table source settles the rows
// whose outcome is not known; those the forwarder had not handed over yet
// are not sent afterwards, and their attempt is given back
// (docs/GUARANTEES.md §2): with relay.max_attempts 1 they are published on
// the next claim, not dead letters "after 1 attempts … publish outcome
// unknown". Only the rows handed over before the deadline count their
// attempt.
func TestRowsNotHandedOverByTheirDeadlineAreGivenBack(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres")
	const rows, handedOver = 50, 10
	const ackDeadline = 500 * time.Millisecond
	for i := range rows {
		_, err := b.prod.Exec(b.insertSQL(), fmt.Sprintf("row-%02d", i), fmt.Sprintf("events.handover.%02d", i), []byte("x"), "{}", nil)
		require.NoError(t, err)
	}
	var stalled atomic.Int64 // how often the row that stalls was admitted
	givenBack := make(chan struct{})
	stall := func(_ context.Context, subject string) error {
		// Admit runs on the forwarder's goroutine right before each
		// hand-over: the rows after this one wait behind it, until the
		// subscriber has given them back at their deadline.
		if subject == fmt.Sprintf("events.handover.%02d", handedOver) && stalled.Add(1) == 1 {
			select {
			case <-givenBack:
			case <-time.After(time.Minute):
			}
		}
		return nil
	}
	r := b.startRelayWith(t, "relay-1", func(c *forwarder.Config) { c.Admit = stall }, func(c *table.SubscriberConfig) {
		c.BatchSize, c.MaxInFlight = rows, rows // one claim of every row
		c.AckDeadline, c.InflightTimeout, c.MaxAttempts = ackDeadline, 10*time.Second, 1
	})
	b.untilMarked(t, 60*time.Second, func() bool { return r.sub.Counters.Released.Load() >= rows-handedOver },
		"the rows not handed over given back at their deadline")
	close(givenBack)
	b.untilMarked(t, 60*time.Second, func() bool {
		return b.rows(t, outbox.StatusDone)+b.rows(t, outbox.StatusPermanentFailed) == rows
	}, "every row done or dead")

	q := "SELECT idempotency_key, status, attempts, coalesce(last_error, '') FROM " + b.store.Table() + " ORDER BY id"
	res, err := b.db.SQL.Query(q)
	require.NoError(t, err)
	defer res.Close()
	for i := 0; res.Next(); i++ {
		var key, status, lastError string
		var attempts int
		require.NoError(t, res.Scan(&key, &status, &attempts, &lastError))
		if i < handedOver {
			// Handed over before the deadline, their PubAcks not awaited
			// yet: outcome unknown, the attempt counted.
			require.Equal(t, 1, attempts, key)
			continue
		}
		require.Equal(t, string(outbox.StatusDone), status, "%s, never sent before its deadline, is no dead letter (%s)", key, lastError)
		require.Equal(t, 1, attempts, "%s was sent once: the attempt it was not sent is not counted", key)
	}
	require.NoError(t, res.Err())
	require.GreaterOrEqual(t, stalled.Load(), int64(2), "the row that stalled went around again")
	msgs := bridgetest.Messages(t, b.js, "EVENTS")
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Headers().Get("Outbox-Idempotency-Key")]++
	}
	for i := handedOver; i < rows; i++ {
		require.Equal(t, 1, seen[fmt.Sprintf("row-%02d", i)], "row-%02d is stored once", i)
	}
}

// TestDiagnosisEndsBeforeTheAckDeadline: a publish that fails is diagnosed
// (the broker's outage or the row's own failure) by asking the JetStream
// API, which in a cluster without quorum does not answer (up to 3 s a
// request). The diagnosis ends before the message's ack deadline, so that
// the outage's outcome (held, the attempt not counted) reaches the source
// in time: with relay.ack_deadline 2s and relay.publish_timeout 1s the
// source gave up first, counted the attempt, and rows of a stream without
// quorum became dead letters (TestBinlogStreamLeaderLost, in CI).
func TestDiagnosisEndsBeforeTheAckDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	_, err := b.prod.Exec(b.insertSQL(), "held", "nostream.held", []byte("x"), "{}", nil)
	require.NoError(t, err)
	var calls atomic.Int64
	unanswered := func(ctx context.Context, _ string, err error) error {
		calls.Add(1)
		select { // an API that does not answer in the time given
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		return &broker.StreamUnavailableError{Stream: "NOSTREAM", Why: "stream info not answered: " + context.Cause(ctx).Error(), Err: err}
	}
	b.startRelayWith(t, "relay-1", func(c *forwarder.Config) { c.Diagnose = unanswered }, func(c *table.SubscriberConfig) {
		c.AckDeadline, c.InflightTimeout, c.MaxAttempts = 500*time.Millisecond, 10*time.Second, 2
		c.HoldBack = 100 * time.Millisecond
	})
	b.untilMarked(t, 30*time.Second, func() bool { return calls.Load() >= 4 }, "the row was not tried again: its diagnosis outlived its deadline")
	var status string
	var attempts int
	require.NoError(t, b.db.SQL.QueryRow("SELECT status, attempts FROM "+b.store.Table()).Scan(&status, &attempts))
	require.NotEqual(t, string(outbox.StatusPermanentFailed), status, "a dead letter for the broker's outage")
	require.Zero(t, attempts, "an attempt counted for the broker's outage")
}

// TestLateSentRowsGetTheirOutcomeBeforeTheAckDeadline: rows of one claimed
// batch handed to the NATS client late (here 1.6 s before their ack
// deadline of 4 s, behind a row that stalled; a long batch of large
// payloads on a slow link, or a turn that waited). Their PubAck is awaited
// until 200 ms before the deadline at most, and a wait cut short so is
// given back (outcome unknown, the attempt not counted) without asking the
// JetStream API about the stream, which had less than its publish timeout
// (2 s) to answer:
//   - to a stream that never answers (an outage: the publish reaches a
//     server, no PubAck comes) their wait ran 400 ms past the deadline, the
//     source counted "publish outcome unknown", and with relay.max_attempts
//     1 they became dead letters of an outage;
//   - to a slow but healthy stream (every PubAck 1.2 s after the publish)
//     they are published; a wait cut 500 ms before the deadline made them
//     an outage of the stream on /readyz, held and published again (a
//     saboteur).
func TestLateSentRowsGetTheirOutcomeBeforeTheAckDeadline(t *testing.T) {
	t.Parallel()
	const rows, onTime = 12, 4
	const ackDeadline, publishTimeout, sentLate = 4 * time.Second, 2 * time.Second, 2400 * time.Millisecond
	// relay runs one claim of rows rows on subjects prefix.NN, whose
	// publishes answer calls for each (no stream captures prefix.>, as a
	// stream that lost its quorum or a slow one does), rows onTime and
	// after handed over sentLate after the first; it returns the relay's
	// counters and how often a failure was diagnosed, once every row was
	// relayed, held or failed (a row given back is claimed again, on time).
	relay := func(t *testing.T, prefix string, answer func(*nats.Conn, *nats.Msg)) (*table.Counters, *atomic.Int64, *bundle) {
		b := setup(t, "sqlite")
		b.publishTimeout = publishTimeout
		nc, err := nats.Connect(b.nats.URL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		_, err = nc.Subscribe(prefix+".>", func(m *nats.Msg) { answer(nc, m) })
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
		for i := range rows {
			_, err := b.prod.Exec(b.insertSQL(), fmt.Sprintf("row-%02d", i), fmt.Sprintf("%s.%02d", prefix, i), []byte("x"), "{}", nil)
			require.NoError(t, err)
		}
		var mu sync.Mutex
		var first time.Time // the batch's first hand-over: about when it was emitted
		stall := func(_ context.Context, subject string) error {
			mu.Lock()
			if first.IsZero() {
				first = time.Now()
			}
			until := first.Add(sentLate)
			mu.Unlock()
			if subject == fmt.Sprintf("%s.%02d", prefix, onTime) {
				time.Sleep(time.Until(until))
			}
			return nil
		}
		diagnosed := new(atomic.Int64)
		outage := func(_ context.Context, _ string, err error) error {
			diagnosed.Add(1)
			return &broker.StreamUnavailableError{Stream: "SILENT", Why: "publish not acknowledged", Err: err}
		}
		r := b.startRelayWith(t, "relay-1", func(c *forwarder.Config) { c.Admit, c.Diagnose = stall, outage }, func(c *table.SubscriberConfig) {
			c.BatchSize, c.MaxInFlight = rows, rows // one claim of every row
			c.AckDeadline, c.InflightTimeout, c.MaxAttempts = ackDeadline, 20*time.Second, 1
			c.HoldBack = time.Minute
		})
		c := &r.sub.Counters
		b.untilMarked(t, 30*time.Second, func() bool { // a row given back is claimed again
			return c.Relayed.Load()+c.Held.Load()+c.Failed.Load()+c.Dead.Load() >= rows
		}, "every row settled")
		return c, diagnosed, b
	}
	rowsOf := func(t *testing.T, b *bundle, check func(key, status string, attempts int, lastError string)) {
		res, err := b.db.SQL.Query("SELECT idempotency_key, status, attempts, coalesce(last_error, '') FROM " + b.store.Table() + " ORDER BY id")
		require.NoError(t, err)
		defer res.Close()
		for res.Next() {
			var key, status, lastError string
			var attempts int
			require.NoError(t, res.Scan(&key, &status, &attempts, &lastError))
			check(key, status, attempts, lastError)
		}
		require.NoError(t, res.Err())
	}

	t.Run("a stream that does not answer", func(t *testing.T) {
		t.Parallel()
		c, diagnosed, b := relay(t, "silent", func(*nats.Conn, *nats.Msg) {})
		rowsOf(t, b, func(key, status string, attempts int, lastError string) {
			require.NotEqual(t, string(outbox.StatusPermanentFailed), status, "%s: a dead letter of the broker's outage (%s)", key, lastError)
			if status == string(outbox.StatusInFlight) {
				attempts-- // claimed again after its hold: this attempt is the claim's
			}
			require.Zero(t, attempts, "%s (%s): an attempt counted for the broker's outage (%s)", key, status, lastError)
		})
		require.GreaterOrEqual(t, c.Released.Load(), int64(rows-onTime), "the rows sent late given back at their cut wait")
		require.GreaterOrEqual(t, diagnosed.Load(), int64(onTime), "the rows sent on time diagnosed")
	})
	t.Run("a slow stream", func(t *testing.T) {
		t.Parallel()
		var seq atomic.Int64
		c, diagnosed, b := relay(t, "slow", func(nc *nats.Conn, m *nats.Msg) {
			ack := fmt.Sprintf(`{"stream":"SLOW","seq":%d}`, seq.Add(1))
			time.AfterFunc(1200*time.Millisecond, func() { _ = nc.Publish(m.Reply, []byte(ack)) })
		})
		rowsOf(t, b, func(key, status string, attempts int, lastError string) {
			require.Equal(t, string(outbox.StatusDone), status, "%s: not published through a slow stream (%s)", key, lastError)
		})
		require.Zero(t, c.Held.Load()+c.Released.Load(), "rows held or given back")
		require.Zero(t, diagnosed.Load(), "a slow stream's PubAcks diagnosed as failures")
	})
}
