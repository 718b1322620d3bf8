package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

var kinds = []string{"sqlite", "postgres", "mysql"}

func setup(t *testing.T, kind string) *outbox.Store {
	t.Helper()
	ctx := context.Background()
	_, table, store := bridgetest.Outbox(t, kind)
	again, err := outbox.Migrate(ctx, store.DB(), table)
	require.NoError(t, err)
	require.Empty(t, again, "a second migrate applies nothing")
	require.NoError(t, store.CheckSchema(ctx))
	return store
}

func enqueue(t *testing.T, s *outbox.Store, key, orderingKey string) int64 {
	t.Helper()
	id, err := s.Enqueue(context.Background(), outbox.Entry{IdempotencyKey: key, Subject: "events.t", Payload: []byte(key), OrderingKey: orderingKey})
	require.NoError(t, err)
	return id
}

type row struct {
	status    string
	attempts  int
	lastError sql.NullString
	owner     sql.NullString
	future    bool // available_at is after the database's now
}

func get(t *testing.T, s *outbox.Store, id int64) row {
	t.Helper()
	q := "SELECT status, attempts, last_error, owner, available_at > now() FROM " + s.Table() + " WHERE id = $1"
	switch s.DB().Dialect() {
	case "sqlite":
		q = "SELECT status, attempts, last_error, owner, available_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now') FROM " + s.Table() + " WHERE id = ?"
	case "mysql":
		q = "SELECT status, attempts, last_error, owner, available_at > UTC_TIMESTAMP(6) FROM " + s.Table() + " WHERE id = ?"
	}
	var r row
	require.NoError(t, s.DB().SQL.QueryRow(q, id).Scan(&r.status, &r.attempts, &r.lastError, &r.owner, &r.future))
	return r
}

func claimIDs(t *testing.T, s *outbox.Store, owner string) []int64 {
	t.Helper()
	rows, err := s.Claim(context.Background(), owner, 100)
	require.NoError(t, err)
	ids := make([]int64, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestMissingTableSaysMigrate(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			url := bridgetest.SQLiteURL(t)
			table := "outbox"
			switch kind {
			case "postgres":
				url, table = bridgetest.PostgresTable(t)
			case "mysql":
				url, table = bridgetest.MySQLTable(t)
			}
			db, err := outbox.Open(context.Background(), url)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			store, err := outbox.NewStore(db, table)
			require.NoError(t, err)
			err = store.CheckSchema(context.Background())
			require.ErrorIs(t, err, outbox.ErrNoTable)
			require.Contains(t, err.Error(), "bridge migrate")
		})
	}
}

// TestEnqueueRefusesInvalidEntries: Enqueue refuses what could never be
// published as given, and writes nothing.
func TestEnqueueRefusesInvalidEntries(t *testing.T) {
	t.Parallel()
	s := setup(t, "sqlite")
	for _, tc := range []struct {
		entry outbox.Entry
		want  string
	}{
		{outbox.Entry{IdempotencyKey: "nl\nkey", Subject: "events.t"}, `idempotency key "nl\nkey" contains the control character '\n'`},
		{outbox.Entry{IdempotencyKey: "tab\tkey", Subject: "events.t"}, "Outbox-Idempotency-Key header"},
		{outbox.Entry{IdempotencyKey: "k", Subject: "events.t", Headers: []byte(`{"Nats-Rollup": "all"}`)}, `header "Nats-Rollup" is reserved for the JetStream server`},
		{outbox.Entry{IdempotencyKey: "k", Subject: "events.*"}, "wildcard"},
	} {
		_, err := s.Enqueue(context.Background(), tc.entry)
		require.ErrorIs(t, err, outbox.ErrInvalidEntry, "%+v", tc.entry)
		require.ErrorContains(t, err, tc.want)
	}
	st, err := s.Stats(context.Background(), 0)
	require.NoError(t, err)
	require.Empty(t, st.Rows[outbox.StatusPending])
}

func TestOpenRefusesUnknownScheme(t *testing.T) {
	t.Parallel()
	_, err := outbox.Open(context.Background(), "mongodb://u:secret@h/db")
	require.ErrorIs(t, err, outbox.ErrUnknownScheme)
	require.Contains(t, err.Error(), "postgres://")
	require.NotContains(t, err.Error(), "secret")
}

func TestParseTableName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"outbox", "app.outbox", "_x1", "Outbox_2"} {
		_, err := outbox.ParseTableName(ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "out-box", "a.b.c", "1x", "x;drop table y", "a .b", `"x"`, strings.Repeat("x", 64)} {
		_, err := outbox.ParseTableName(bad)
		require.Error(t, err, bad)
	}
}

func TestFencingRejectsMarksOfALostLease(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, kind)
			id := enqueue(t, s, "k1", "")
			a, err := s.Claim(ctx, "relay-a", 10)
			require.NoError(t, err)
			require.Len(t, a, 1)

			// Relay A stalls past its lease (any age > 0 here; SQLite's
			// clock has millisecond steps); B takes the row over.
			bridgetest.WaitFor(t, 5*time.Second, func() bool {
				n, err := s.RequeueInflightOlderThan(ctx, 0)
				require.NoError(t, err)
				return n == 1
			})
			r := get(t, s, id)
			require.Equal(t, "failed", r.status)
			require.Equal(t, "requeued after inflight timeout", r.lastError.String)
			require.False(t, r.owner.Valid)
			require.Equal(t, 1, r.attempts, "requeue keeps attempts")

			b, err := s.Claim(ctx, "relay-b", 10)
			require.NoError(t, err)
			require.Len(t, b, 1)
			require.Equal(t, 2, b[0].Attempt)

			// A wakes up: its marks match nothing.
			changed, err := s.MarkDone(ctx, "relay-a", []outbox.Done{{ID: id, Attempt: a[0].Attempt, Stream: "S", Seq: 1}}, false)
			require.NoError(t, err)
			require.Zero(t, changed)
			changed, err = s.MarkFailed(ctx, "relay-a", []outbox.Failure{{ID: id, Attempt: a[0].Attempt, Err: "late", Permanent: true}})
			require.NoError(t, err)
			require.Zero(t, changed)
			// Same owner name but an older claim (a restarted pod keeps its hostname): fenced too.
			changed, err = s.MarkDone(ctx, "relay-b", []outbox.Done{{ID: id, Attempt: a[0].Attempt, Stream: "S", Seq: 1}}, false)
			require.NoError(t, err)
			require.Zero(t, changed)

			changed, err = s.MarkDone(ctx, "relay-b", []outbox.Done{{ID: id, Attempt: b[0].Attempt, Stream: "S", Seq: 2}}, false)
			require.NoError(t, err)
			require.Equal(t, int64(1), changed)
			require.Equal(t, "done", get(t, s, id).status)
		})
	}
}

func TestOrderingIsolation(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, kind)
			a1 := enqueue(t, s, "a1", "A")
			a2 := enqueue(t, s, "a2", "A")
			b1 := enqueue(t, s, "b1", "B")
			b2 := enqueue(t, s, "b2", "B")
			free := enqueue(t, s, "free", "")

			require.Equal(t, []int64{a1, b1, free}, claimIDs(t, s, "r"), "one row per key at a time")
			// a1 fails (retryable, backing off); b1 is done.
			_, err := s.MarkFailed(ctx, "r", []outbox.Failure{{ID: a1, Attempt: 1, Err: "no stream", Backoff: time.Hour}})
			require.NoError(t, err)
			_, err = s.MarkDone(ctx, "r", []outbox.Done{{ID: b1, Attempt: 1, Stream: "S", Seq: 1}, {ID: free, Attempt: 1, Stream: "S", Seq: 2}}, false)
			require.NoError(t, err)
			require.Equal(t, []int64{b2}, claimIDs(t, s, "r"), "a failed row blocks its own key only")
			r := get(t, s, a1)
			require.Equal(t, "failed", r.status)
			require.True(t, r.future, "available_at is pushed back by the backoff")

			// A dead letter does not block its key.
			_, err = s.MarkFailed(ctx, "r", []outbox.Failure{{ID: b2, Attempt: 1, Err: "x", Permanent: true}})
			require.NoError(t, err)
			_, err = s.DB().SQL.Exec("UPDATE " + s.Table() + " SET available_at = created_at WHERE id = " + fmt.Sprint(a1))
			require.NoError(t, err)
			require.Equal(t, []int64{a1}, claimIDs(t, s, "r"))
			_, err = s.MarkFailed(ctx, "r", []outbox.Failure{{ID: a1, Attempt: 2, Err: "poison", Permanent: true}})
			require.NoError(t, err)
			require.Equal(t, []int64{a2}, claimIDs(t, s, "r"))
		})
	}
}

func TestRetryAndPurge(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, kind)
			dead1, dead2, done := enqueue(t, s, "d1", ""), enqueue(t, s, "d2", ""), enqueue(t, s, "ok", "")
			require.Len(t, claimIDs(t, s, "r"), 3)
			_, err := s.MarkFailed(ctx, "r", []outbox.Failure{{ID: dead1, Attempt: 1, Err: "x", Permanent: true}, {ID: dead2, Attempt: 1, Err: "y", Permanent: true}})
			require.NoError(t, err)
			_, err = s.MarkDone(ctx, "r", []outbox.Done{{ID: done, Attempt: 1, Stream: "S", Seq: 9}}, false)
			require.NoError(t, err)

			n, err := s.RetryDead(ctx, []int64{dead1, done, 999})
			require.NoError(t, err)
			require.Equal(t, 1, n, "only dead letters move")
			r := get(t, s, dead1)
			require.Equal(t, "pending", r.status)
			require.Zero(t, r.attempts)
			n, err = s.RetryAllDead(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)

			n, err = s.PurgeDoneOlderThan(ctx, time.Hour, 10)
			require.NoError(t, err)
			require.Zero(t, n, "relayed just now")
			bridgetest.WaitFor(t, 5*time.Second, func() bool { // older than 0: once the clock ticked
				n, err := s.PurgeDoneOlderThan(ctx, 0, 1)
				require.NoError(t, err)
				return n == 1
			})
			st, err := s.Stats(ctx, 5)
			require.NoError(t, err)
			require.Equal(t, int64(2), st.Rows[outbox.StatusPending])
			require.Zero(t, st.Rows[outbox.StatusDone])
		})
	}
}

func TestLastErrorSurvivesAnyText(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, kind)
			id := enqueue(t, s, "k", "")
			require.Len(t, claimIDs(t, s, "r"), 1)
			nasty := "nul\x00byte, bad utf-8 \xff\xfe, " + strings.Repeat("é", 3000)
			n, err := s.MarkFailed(ctx, "r", []outbox.Failure{{ID: id, Attempt: 1, Err: nasty, Permanent: true}})
			require.NoError(t, err)
			require.Equal(t, int64(1), n)
			got := get(t, s, id).lastError.String
			require.True(t, strings.HasPrefix(got, `nul\x00byte, bad utf-8 \xff\xfe, éé`), got[:40])
			require.LessOrEqual(t, len(got), outbox.MaxErrorLen)
			require.True(t, strings.HasSuffix(got, "…"))
		})
	}
}

// handler drives a Subscriber the way the forwarder does, deciding per
// delivery (row) of each message.
func runSubscriber(t *testing.T, s *outbox.Store, cfg outbox.SubscriberConfig, handle func(*source.Delivery)) *outbox.Subscriber {
	t.Helper()
	cfg.Owner = "relay-test"
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	sub, err := outbox.NewSubscriber(s, slog.New(slog.NewTextHandler(io.Discard, nil)), cfg)
	require.NoError(t, err)
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
			runSubscriber(t, s, outbox.SubscriberConfig{MaxAttempts: 3, BackoffInitial: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond},
				func(d *source.Delivery) {
					d.Report(source.Failed(errors.New("no responders: stream offline"), source.Retryable))
				})
			bridgetest.WaitFor(t, 10*time.Second, func() bool { return get(t, s, id).status == "permanent_failed" })
			r := get(t, s, id)
			require.Equal(t, 3, r.attempts)
			require.Contains(t, r.lastError.String, "gave up after 3 attempts")
			require.Contains(t, r.lastError.String, "stream offline")
		})
	}
}

func TestSubscriberSettlesOnAckDeadline(t *testing.T) {
	onEveryDatabase(t, subscriberSettlesOnAckDeadline)
}

func subscriberSettlesOnAckDeadline(t *testing.T, kind string) {
	s := setup(t, kind)
	id := enqueue(t, s, "k", "")
	runSubscriber(t, s, outbox.SubscriberConfig{AckDeadline: 50 * time.Millisecond, BackoffInitial: time.Hour, BackoffMax: time.Hour},
		func(d *source.Delivery) { _ = d.Handover() }) // hands it to NATS (as the forwarder does), never acks
	bridgetest.WaitFor(t, 10*time.Second, func() bool { return get(t, s, id).status == "failed" })
	require.Contains(t, get(t, s, id).lastError.String, "ack deadline")
	require.Equal(t, 1, get(t, s, id).attempts, "sent, its outcome unknown: the attempt counts")
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
	var calls atomic.Int32
	runSubscriber(t, s, outbox.SubscriberConfig{AckDeadline: 50 * time.Millisecond, MaxAttempts: 1},
		func(d *source.Delivery) {
			if calls.Add(1) == 1 {
				time.Sleep(200 * time.Millisecond) // its turn comes after the deadline
				refused <- d.Handover()
				return
			}
			if d.Handover() == nil { // claimed again: sent, published
				d.Report(source.Published("S", 1, false))
			}
		})
	require.ErrorIs(t, <-refused, source.ErrPublishDeadline)
	bridgetest.WaitFor(t, 10*time.Second, func() bool { st := get(t, s, id).status; return st == "done" || st == "permanent_failed" })
	r := get(t, s, id)
	require.Equal(t, "done", r.status, "no dead letter with max_attempts 1: %s", r.lastError.String)
	require.Equal(t, 1, r.attempts, "the attempt it was not sent is not counted")
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
	runSubscriber(t, s, outbox.SubscriberConfig{BatchSize: 10}, func(d *source.Delivery) {
		if d.Msg.Header.Get(outbox.HeaderID) == fmt.Sprint(ids[0]) {
			<-release
		}
		d.Report(source.Published("S", 1, false))
	})
	bridgetest.WaitFor(t, 10*time.Second, func() bool {
		for _, id := range ids[1:] {
			if get(t, s, id).status != "done" {
				return false
			}
		}
		return true
	}, "the acked messages behind the slow one were not settled")
	require.Equal(t, "in_flight", get(t, s, ids[0]).status)
	close(release)
	bridgetest.WaitFor(t, 10*time.Second, func() bool { return get(t, s, ids[0]).status == "done" })
}

func TestSubscriberRefundsUnavailable(t *testing.T) { onEveryDatabase(t, subscriberRefundsUnavailable) }

func subscriberRefundsUnavailable(t *testing.T, kind string) {
	s := setup(t, kind)
	id := enqueue(t, s, "k", "")
	nacks := make(chan struct{}, 100)
	sub := runSubscriber(t, s, outbox.SubscriberConfig{MaxAttempts: 2}, func(d *source.Delivery) {
		if len(nacks) < 5 {
			nacks <- struct{}{}
			d.Report(source.Failed(errors.New("nats: server is disconnected"), source.Unavailable))
			return
		}
		d.Report(source.Published("S", 1, false))
	})
	bridgetest.WaitFor(t, 10*time.Second, func() bool { return get(t, s, id).status == "done" })
	require.Equal(t, 1, get(t, s, id).attempts, "five unavailable attempts did not count against max_attempts 2")
	require.Equal(t, int64(5), sub.Counters.Released.Load())
}

func TestSubscriberDrainsOnClose(t *testing.T) { onEveryDatabase(t, subscriberDrainsOnClose) }

func subscriberDrainsOnClose(t *testing.T, kind string) {
	s := setup(t, kind)
	for i := range 50 {
		enqueue(t, s, fmt.Sprint("k", i), "")
	}
	sub, err := outbox.NewSubscriber(s, slog.New(slog.NewTextHandler(io.Discard, nil)), outbox.SubscriberConfig{
		Owner: "r", MaxInFlight: 10,
	})
	require.NoError(t, err)
	// The drain gives up when the test says, not after a DrainTimeout
	// that a slow machine could pass before the five acks are written.
	draining, expire := outbox.DrainSignal(sub), outbox.ManualDrain(sub)
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
	bridgetest.WaitFor(t, 10*time.Second, func() bool { return sub.Counters.Relayed.Load() == 5 }, "the five acked during the drain were not settled")
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
