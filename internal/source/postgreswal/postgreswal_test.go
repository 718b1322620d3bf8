package postgreswal_test

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

// env is one outbox table with its publication and slot on the logical
// test server, and one NATS server with stream EVENTS on events.>.
type env struct {
	url   string
	names postgreswal.Names
	db    *outbox.DB // the relay's pool
	store *outbox.Store
	prod  *sql.DB // the producers' own pool
	nats  *bridgetest.NATS
	js    jetstream.JetStream
	// marks is signalled by every relay of the env after each write of its
	// marks: the table's statuses move then.
	marks *source.TestSignal[int]
}

func setup(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	url, table := bridgetest.PostgresLogicalTable(t)
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = outbox.Migrate(ctx, db, table)
	require.NoError(t, err)
	store, err := outbox.NewStore(db, table)
	require.NoError(t, err)
	prod, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { prod.Close() })
	slot, pub := bridgetest.WALNames(t, url)
	e := &env{url: url, names: postgreswal.Names{Table: table, Slot: slot, Publication: pub}, db: db, store: store, prod: prod, marks: source.NewTestSignal[int]()}
	createdPub, createdSlot, err := postgreswal.Setup(ctx, db.SQL, e.names)
	require.NoError(t, err)
	require.True(t, createdPub && createdSlot)
	e.nats = bridgetest.StartNATS(t)
	_, e.js = e.nats.JetStream(t)
	bridgetest.CreateStream(t, e.js, "EVENTS", "events.>")
	return e
}

// This file still sleeps and polls where what a test waits for is a real
// server's state or time itself: a slot becoming active or confirmed on the
// server, a NATS outage's length, a backoff or a duplicate window passing,
// metrics sampled over an outage. What happens inside the relay (marks) is
// waited for on its signal (untilMarked).

// relay is a running subscriber and forwarder.
type relay struct {
	sub  *postgreswal.Subscriber
	stop func()
	logs *bridgetest.SyncBuffer
}

// relay starts the source with cfg (names and URL filled in) and the
// forwarder of source: table; it stops when the test ends, or with stop.
func (e *env) relay(t *testing.T, d source.LogDelivery) *relay {
	t.Helper()
	ctx := context.Background()
	cfg := postgreswal.Config{Names: e.names, ReplicationURL: e.url, LogDelivery: d}
	if cfg.AckDeadline == 0 {
		cfg.AckDeadline = 2 * time.Second
	}
	if cfg.BackoffInitial == 0 {
		cfg.BackoffInitial, cfg.BackoffMax = 50*time.Millisecond, 500*time.Millisecond
	}
	logs := &bridgetest.SyncBuffer{}
	var out io.Writer = logs
	if testing.Verbose() {
		out = io.MultiWriter(logs, os.Stderr)
	}
	logger := slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	nc, err := nats.Connect(e.nats.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	require.NoError(t, err)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(time.Second), jetstream.WithPublishAsyncMaxPending(4096))
	require.NoError(t, err)
	pub, err := sink.New(js, sink.Config{PublishTimeout: time.Second, Marshaler: forwarder.NewPublisherMarshaler()})
	require.NoError(t, err)
	cfg.Connected = nc.IsConnected
	sub, err := postgreswal.NewSubscriber(ctx, e.db, e.store, logger, cfg)
	require.NoError(t, err)
	sub.Signals.Marked = e.marks
	// As the relay wires it (ProvideForwarder): the rows reach the
	// forwarder in batches, and the keeper tells a failed publish that is
	// the broker's outage or, from the server's answer, the row's own.
	keeper := broker.NewKeeper(js, nil, logger)
	f, err := forwarder.New(source.Coalesce(sub, 500), e.names.Table, pub, logger, forwarder.Config{CloseTimeout: 10 * time.Second, Connected: nc.IsConnected,
		StreamSeen: keeper.Published, StreamMissing: keeper.Missing, Diagnose: keeper.Diagnose})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(runCtx) }()
	select {
	case <-f.Running():
	case err := <-done:
		t.Fatalf("forwarder did not start: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Errorf("the relay did not stop within 30s")
			}
			nc.Close()
		})
	}
	t.Cleanup(stop)
	t.Cleanup(func() {
		if t.Failed() && !testing.Verbose() {
			t.Logf("relay log:\n%s", logs.String())
		}
	})
	return &relay{sub: sub, stop: stop, logs: logs}
}

// count returns the rows in status ("" for all).
func (e *env) count(t *testing.T, status outbox.Status) int {
	t.Helper()
	var n int
	require.NoError(t, e.prod.QueryRow(`SELECT count(*) FROM `+e.names.Table+` WHERE $1 = '' OR status = $1`, string(status)).Scan(&n))
	return n
}

// waitDone returns once n rows are done, asking after each write of marks.
func (e *env) waitDone(t *testing.T, n int, d time.Duration) {
	t.Helper()
	e.untilMarked(t, d, func() bool { return e.count(t, outbox.StatusDone) >= n }, n, " rows done")
}

// untilMarked returns once cond holds, asking it after each write of marks
// by a relay of e, failing after d.
func (e *env) untilMarked(t *testing.T, d time.Duration, cond func() bool, what ...any) {
	t.Helper()
	e.marks.WaitUntilWithin(t, d, cond, what...)
}

// insertTx inserts the rows ids [from, to) in one transaction, holding it
// open for hold before the commit; every row of producer p has the
// ordering key p.
func (e *env) insertTx(t *testing.T, p, from, to int, hold time.Duration) {
	t.Helper()
	tx, err := e.prod.Begin()
	require.NoError(t, err)
	for i := from; i < to; i++ {
		_, err := tx.Exec(`INSERT INTO `+e.names.Table+` (idempotency_key, subject, payload, headers, ordering_key) VALUES ($1, $2, $3, $4, $5)`,
			"k-"+strconv.Itoa(i), "events.wal", []byte("row\x00"+strconv.Itoa(i)), `{"X-Row": "`+strconv.Itoa(i)+`"}`, "p"+strconv.Itoa(p))
		require.NoError(t, err)
	}
	time.Sleep(hold)
	require.NoError(t, tx.Commit())
}

// produce runs producers goroutines that insert total rows between them
// in transactions of 1 to 5 rows, each held open for up to 2 ms before its
// commit, so that commits come out of id order. It returns when all are
// committed.
func (e *env) produce(t *testing.T, producers, total int) {
	t.Helper()
	var next int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), uint64(time.Now().UnixNano())))
			for {
				n := 1 + rng.IntN(5)
				mu.Lock()
				from := next
				next = min(next+n, total)
				to := next
				mu.Unlock()
				if from >= total {
					return
				}
				e.insertTx(t, p, from, to, time.Duration(rng.IntN(2000))*time.Microsecond)
			}
		})
	}
	wg.Wait()
}

// streamIDs returns the Outbox-Id of every message in EVENTS, in stream
// order, and fails on a Nats-Msg-Id seen twice.
func (e *env) streamIDs(t *testing.T) []int64 {
	t.Helper()
	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	seen := make(map[string]bool, len(msgs))
	ids := make([]int64, 0, len(msgs))
	for _, m := range msgs {
		key := m.Headers().Get(jetstream.MsgIDHeader)
		require.False(t, seen[key], "message %s is in the stream twice", key)
		seen[key] = true
		id, err := strconv.ParseInt(m.Headers().Get("Outbox-Id"), 10, 64)
		require.NoError(t, err)
		require.Equal(t, "k-"+m.Headers().Get("X-Row"), key, "headers of row %d", id)
		require.Equal(t, "row\x00"+m.Headers().Get("X-Row"), string(m.Data()), "payload of row %d", id)
		ids = append(ids, id)
	}
	return ids
}

// requireCommitOrder checks that the stream holds exactly the rows the
// oracle saw committed, once each, in commit order.
func requireCommitOrder(t *testing.T, stream []int64, committed []bridgetest.Committed) {
	t.Helper()
	require.Len(t, stream, len(committed), "the stream holds one message per committed row")
	for i, c := range committed {
		require.Equal(t, c.ID, stream[i], "stream position %d: commit order says row %d", i, c.ID)
	}
	t.Logf("%d rows in commit order, %d of them committed after a row with a larger id", len(committed), reordered(committed))
}

// reordered counts the rows committed after a row with a larger id.
func reordered(committed []bridgetest.Committed) int {
	n := 0
	for i := 1; i < len(committed); i++ {
		if committed[i].ID < committed[i-1].ID {
			n++
		}
	}
	return n
}

// scaled is n, or n/4 under the race detector.
func scaled(n int) int {
	if bridgetest.Race {
		return n / 4
	}
	return n
}

// TestCommitOrderExactlyOnce: rows from 8 producers whose commits come out
// of id order are in the stream exactly once each, in commit order (as
// PostgreSQL's own test_decoding plugin reports it), and every row is done
// with its stream sequence.
func TestCommitOrderExactlyOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	oracle := bridgetest.NewOracle(t, e.url, e.names.Table)
	e.relay(t, source.LogDelivery{})
	total := scaled(20000)
	e.produce(t, 8, total)
	e.waitDone(t, total, 120*time.Second)

	committed := oracle.Rows(t)
	require.Positive(t, reordered(committed), "the producers did not commit out of id order: the test shows nothing")
	requireCommitOrder(t, e.streamIDs(t), committed)
	var unsequenced int
	require.NoError(t, e.prod.QueryRow(`SELECT count(*) FROM `+e.names.Table+` WHERE stream IS DISTINCT FROM 'EVENTS' OR stream_seq IS NULL OR attempts <> 1`).Scan(&unsequenced))
	require.Zero(t, unsequenced, "every row done with its stream, sequence and one attempt")
}

// slotSample is the slot's confirmed position at a moment.
type slotSample struct {
	at        time.Time // right after the query returned
	confirmed uint64
}

// sampleSlot records the slot's confirmed position (as the server knows
// it: what a restart starts from) every 20 ms until stop is closed.
func (e *env) sampleSlot(t *testing.T, stop <-chan struct{}) <-chan []slotSample {
	out := make(chan []slotSample, 1)
	go func() {
		var samples []slotSample
		defer func() { out <- samples }()
		for {
			var c sql.NullInt64
			err := e.prod.QueryRow(`SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint FROM pg_replication_slots WHERE slot_name = $1`, e.names.Slot).Scan(&c)
			if err != nil {
				t.Errorf("sample the slot: %v", err)
				return
			}
			samples = append(samples, slotSample{at: time.Now(), confirmed: uint64(c.Int64)})
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return out
}

// requireConfirmedAfterStored checks that the slot's confirmed position
// never passed a row before the stream stored it: for every row, the
// first sample at or past the end of its transaction's commit was taken
// after the stream's timestamp of the row's message (the in-process NATS
// server and the test share a clock).
func requireConfirmedAfterStored(t *testing.T, samples []slotSample, committed []bridgetest.Committed, stored map[int64]time.Time) {
	t.Helper()
	require.NotEmpty(t, samples)
	checked := 0
	for _, c := range committed {
		i, _ := slices.BinarySearchFunc(samples, c.CommitEnd, func(s slotSample, lsn uint64) int { return cmp.Compare(s.confirmed, lsn) })
		if i == len(samples) {
			continue // confirmed after the last sample
		}
		at, ok := stored[c.ID]
		require.True(t, ok, "row %d is not in the stream", c.ID)
		require.False(t, at.After(samples[i].at), "the slot confirmed row %d (commit end %X) at %s, before the stream stored it at %s",
			c.ID, c.CommitEnd, samples[i].at.Format(time.StampMicro), at.Format(time.StampMicro))
		checked++
	}
	t.Logf("%d samples; %d rows confirmed while sampling, none before it was stored", len(samples), checked)
}

// storedAt returns when the stream stored each row's message.
func (e *env) storedAt(t *testing.T) map[int64]time.Time {
	t.Helper()
	out := map[int64]time.Time{}
	for _, m := range bridgetest.Messages(t, e.js, "EVENTS") {
		md, err := m.Metadata()
		require.NoError(t, err)
		id, err := strconv.ParseInt(m.Headers().Get("Outbox-Id"), 10, 64)
		require.NoError(t, err)
		out[id] = md.Timestamp
	}
	return out
}

// TestStreamOutage: NATS is down for 10 s while rows keep being
// committed. Nothing is lost, the stream is in commit order, and the
// slot's confirmed position never passes a row the stream has not stored.
// The slot's metrics move with the outage and fall back after it: the lag
// of the oldest waiting row and the WAL not yet confirmed.
func TestStreamOutage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	oracle := bridgetest.NewOracle(t, e.url, e.names.Table)
	r := e.relay(t, source.LogDelivery{MaxInFlight: 300, SweepInterval: 500 * time.Millisecond})
	stopSampling := make(chan struct{})
	samples := e.sampleSlot(t, stopSampling)

	total := scaled(8000)
	before, during := total/4, total*3/4
	for i := 0; i < before; i += 50 {
		e.insertTx(t, 0, i, i+50, 0)
	}
	e.waitDone(t, before/2, 60*time.Second)

	e.nats.Stop()
	outage := time.Now()
	for i := before; i < during; i += 50 {
		e.insertTx(t, 1, i, i+50, 0)
	}
	var lag float64
	var unconfirmed int64
	for time.Since(outage) < 10*time.Second {
		lag = max(lag, r.sub.LagSeconds())
		info, err := postgreswal.SlotStatus(context.Background(), e.prod, e.names.Slot)
		require.NoError(t, err)
		unconfirmed = max(unconfirmed, info.UnconfirmedBytes)
		time.Sleep(100 * time.Millisecond)
	}
	require.Greater(t, lag, 5.0, "bridge_wal_slot_lag_seconds grows while rows wait")
	require.Greater(t, unconfirmed, int64(64<<10), "bridge_wal_slot_unconfirmed_bytes grows while rows wait")
	require.Less(t, e.count(t, outbox.StatusDone), during, "rows committed during the outage waited for it")
	e.nats.Restart(t)

	for i := during; i < total; i += 50 {
		e.insertTx(t, 2, i, i+50, 0)
	}
	e.waitDone(t, total, 120*time.Second)
	close(stopSampling)
	requireCommitOrder(t, e.streamIDs(t), oracle.Rows(t))
	requireConfirmedAfterStored(t, <-samples, oracle.Rows(t), e.storedAt(t))

	// The metrics fall back: nothing waits, and the sweep's watermark
	// moves the confirmed position past the WAL of the marks.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := postgreswal.SlotStatus(context.Background(), e.prod, e.names.Slot)
		require.NoError(t, err)
		if r.sub.LagSeconds() == 0 && info.UnconfirmedBytes < 16<<10 {
			break
		}
		require.True(t, time.Now().Before(deadline), "metrics did not fall back: lag %.1fs, unconfirmed %d bytes", r.sub.LagSeconds(), info.UnconfirmedBytes)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSweepPublishesRowsTheSlotDoesNotDeliver: a lost slot created again
// starts at the current position; the rows committed before it stay
// pending, and the sweep publishes them (after the rows the new slot
// delivers first). So does it a dead letter put back by retry (an UPDATE,
// which the publication does not carry) and a row a relay of source:
// table left in flight.
func TestSweepPublishesRowsTheSlotDoesNotDeliver(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	for i := 0; i < 300; i += 100 {
		e.insertTx(t, 0, i, i+100, 0)
	}
	_, err := e.prod.Exec(`UPDATE ` + e.names.Table + ` SET status = 'permanent_failed', last_error = 'poisoned by hand' WHERE id = 10`)
	require.NoError(t, err)
	_, err = e.prod.Exec(`UPDATE ` + e.names.Table + ` SET status = 'in_flight', owner = 'gone', attempts = 1, claimed_at = now() - interval '1 hour' WHERE id = 20`)
	require.NoError(t, err)
	// The slot is lost and created again: it delivers nothing of the above.
	bridgetest.DropSlot(t, e.url, e.names.Slot)
	_, _, err = postgreswal.Setup(ctx, e.db.SQL, e.names)
	require.NoError(t, err)

	r := e.relay(t, source.LogDelivery{SweepInterval: 200 * time.Millisecond, SweepBatch: 64})
	e.insertTx(t, 0, 300, 400, 0) // delivered by the new slot
	e.waitDone(t, 399, 60*time.Second)
	require.Equal(t, outbox.StatusPermanentFailed, e.status(t, 10), "a dead letter is not swept")

	n, err := e.store.RetryDead(ctx, []int64{10})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	e.waitDone(t, 400, 30*time.Second)
	require.GreaterOrEqual(t, r.sub.Counters.Swept.Load(), int64(300))
	ids := e.streamIDs(t)
	require.Len(t, ids, 400, "each row once")
	var attempts int
	require.NoError(t, e.prod.QueryRow(`SELECT attempts FROM `+e.names.Table+` WHERE id = 20`).Scan(&attempts))
	require.Equal(t, 2, attempts, "the row left in flight counts its earlier attempt")
}

func (e *env) status(t *testing.T, id int64) outbox.Status {
	t.Helper()
	st, ok, err := e.store.StatusOf(context.Background(), id)
	require.NoError(t, err)
	require.True(t, ok, "row %d", id)
	return st
}

// TestRowsThatCannotBePublishedAreDeadLetters: rows that can never be
// published become dead letters with their reason and hold nothing up; a
// row whose subject no stream captures is retried (holding the rows after
// it, in commit order) until relay.max_attempts, then is a dead letter
// too. Once a stream captures it, bridge retry publishes it.
func TestRowsThatCannotBePublishedAreDeadLetters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	r := e.relay(t, source.LogDelivery{MaxAttempts: 3, SweepInterval: 200 * time.Millisecond})
	insert := func(key, subject, headers string) int64 {
		var id int64
		require.NoError(t, e.prod.QueryRow(`INSERT INTO `+e.names.Table+` (idempotency_key, subject, payload, headers) VALUES ($1, $2, 'x', $3) RETURNING id`,
			key, subject, headers).Scan(&id))
		return id
	}
	good1 := insert("good-1", "events.ok", "{}")
	badSubject := insert("bad-subject", "events.with space", "{}")
	badHeaders := insert("bad-headers", "events.ok", `{"X-N": 1}`)
	rollup := insert("rollup", "events.ok", `{"Nats-Rollup": "all"}`)
	noStream := insert("no-stream", "other.subject", "{}")
	good2 := insert("good-2", "events.ok", "{}")
	e.waitDone(t, 2, 30*time.Second)
	e.untilMarked(t, 30*time.Second, func() bool { return e.count(t, outbox.StatusPermanentFailed) >= 4 }, "4 dead letters")

	for id, want := range map[int64]string{badSubject: "whitespace", badHeaders: "neither a string", rollup: "Nats-Rollup", noStream: "gave up after 3 attempts"} {
		var st, lastErr string
		require.NoError(t, e.prod.QueryRow(`SELECT status, last_error FROM `+e.names.Table+` WHERE id = $1`, id).Scan(&st, &lastErr))
		require.Equal(t, "permanent_failed", st, "row %d", id)
		require.Contains(t, lastErr, want, "row %d", id)
	}
	require.Equal(t, []int64{good1, good2}, e.streamIDsOf(t, "EVENTS"))
	require.Equal(t, int64(4), r.sub.Counters.Dead.Load())

	bridgetest.CreateStream(t, e.js, "OTHER", "other.>")
	n, err := e.store.RetryDead(ctx, []int64{noStream})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	e.waitDone(t, 3, 30*time.Second)
	require.Equal(t, []int64{noStream}, e.streamIDsOf(t, "OTHER"))
}

// streamIDsOf returns the Outbox-Id of every message of stream, in order.
func (e *env) streamIDsOf(t *testing.T, stream string) []int64 {
	t.Helper()
	var ids []int64
	for _, m := range bridgetest.Messages(t, e.js, stream) {
		id, err := strconv.ParseInt(m.Headers().Get("Outbox-Id"), 10, 64)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

// TestStreamRestarts: the replication connection is cut five times while
// rows flow. Each time the relay starts the stream again from the slot's
// position: every row once, in commit order, and a row already published
// in the old session is not published again (the pipeline keeps it).
func TestStreamRestarts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	oracle := bridgetest.NewOracle(t, e.url, e.names.Table)
	r := e.relay(t, source.LogDelivery{MaxInFlight: 500})
	total := scaled(10000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < total; i += 20 {
			e.insertTx(t, i%7, i, i+20, 0)
		}
	}()
	for range 5 {
		time.Sleep(300 * time.Millisecond)
		var n int
		require.NoError(t, e.prod.QueryRow(`SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active`, e.names.Slot).Scan(&n))
	}
	<-done
	e.waitDone(t, total, 120*time.Second)
	require.Positive(t, r.sub.Counters.Restarts.Load())
	requireCommitOrder(t, e.streamIDs(t), oracle.Rows(t))
	t.Logf("%d restarts, %d rows read, %d published again (deduplicated)", r.sub.Counters.Restarts.Load(), r.sub.Counters.Read.Load(), r.sub.Counters.Deduplicated.Load())
	require.Zero(t, r.sub.Counters.Deduplicated.Load(), "a row published before a restart was published again")
}

// TestRowRetriedPastTheWindowIsReconciled: a row whose first attempt
// failed is retried after the stream's duplicate window has forgotten an
// earlier copy of it (here: a copy stored before, and a stream full with
// discard-new that refuses the row as long as it is not known). Before the
// retry the relay finds the copy in the stream and marks the row done with
// its sequence, instead of publishing it again.
func TestRowRetriedPastTheWindowIsReconciled(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	_, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}, Duplicates: 300 * time.Millisecond,
		MaxMsgs: 1, Discard: jetstream.DiscardNew})
	require.NoError(t, err)
	copyOf := nats.NewMsg("late.x")
	copyOf.Header.Set(jetstream.MsgIDHeader, "late-1")
	_, err = e.js.PublishMsg(ctx, copyOf)
	require.NoError(t, err)
	time.Sleep(400 * time.Millisecond) // the window forgets late-1

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := dedup.NewReconciler(e.js, logger, dedup.ReconcilerConfig{PublishTimeout: time.Second})
	r := e.relay(t, source.LogDelivery{Reconciler: rec})
	var id int64
	require.NoError(t, e.prod.QueryRow(`INSERT INTO `+e.names.Table+` (idempotency_key, subject, payload) VALUES ('late-1', 'late.x', 'x') RETURNING id`).Scan(&id))
	e.waitDone(t, 1, 30*time.Second)
	var seq int64
	require.NoError(t, e.prod.QueryRow(`SELECT stream_seq FROM `+e.names.Table+` WHERE id = $1`, id).Scan(&seq))
	require.Equal(t, int64(1), seq, "the row is done with the sequence of the copy")
	// Found in the stream, not stored twice: by the reconciler after the
	// first attempt failed (the stream is full), or, when the row was
	// committed before the session's start position, by the check of rows
	// read again, which asks the same reconciler.
	_ = r
	require.Equal(t, int64(1), rec.Reconciled.Load())
}

// TestDeleteOnRelayAndRowsAlreadyGone: with delete_on_relay a row is
// deleted at its PubAck. A second slot, created before the rows, delivers
// them again after they are gone (as the slot of a relay that died before
// confirming them would): committed before the session began, they are
// checked against the table, found gone (their transactions visible) and
// settled without a publish, so the stream holds each once and the slot's
// position moves on.
func TestDeleteOnRelayAndRowsAlreadyGone(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	second := e.names
	second.Slot = e.names.Slot + "_b"
	t.Cleanup(func() { bridgetest.DropSlot(t, e.url, second.Slot) })
	_, _, err := postgreswal.Setup(ctx, e.db.SQL, second)
	require.NoError(t, err)

	first := e.relay(t, source.LogDelivery{DeleteOnRelay: true})
	for i := 0; i < 500; i += 50 {
		e.insertTx(t, 0, i, i+50, 0)
	}
	e.untilMarked(t, 30*time.Second, func() bool { return e.count(t, "") == 0 }, "every row deleted at its PubAck")
	first.stop()
	require.Equal(t, int64(500), first.sub.Counters.Relayed.Load())

	e.names = second
	again := e.relay(t, source.LogDelivery{DeleteOnRelay: true})
	deadline := time.Now().Add(30 * time.Second)
	for again.sub.Counters.Checked.Load() < 500 {
		require.True(t, time.Now().Before(deadline), "%d of 500 rows settled again", again.sub.Counters.Checked.Load())
		time.Sleep(50 * time.Millisecond)
	}
	// Committed before its session began and gone from the table: relayed
	// (deleted after its PubAck), settled without a publish (check.go).
	require.Zero(t, again.sub.Counters.Relayed.Load(), "no row was published again")
	require.Len(t, e.streamIDs(t), 500)
	deadline = time.Now().Add(30 * time.Second)
	for {
		info, err := postgreswal.SlotStatus(ctx, e.prod, second.Slot)
		require.NoError(t, err)
		if info.UnconfirmedBytes < 16<<10 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the second slot's position does not move: %d bytes unconfirmed", info.UnconfirmedBytes)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSubscribeAfterClose: Subscribe after Close fails with
// source.ErrClosed, the sentinel every source returns.
func TestSubscribeAfterClose(t *testing.T) {
	t.Parallel()
	e := setup(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	sub, err := postgreswal.NewSubscriber(context.Background(), e.db, e.store, logger, postgreswal.Config{Names: e.names, ReplicationURL: e.url})
	require.NoError(t, err)
	require.NoError(t, sub.Close())
	_, err = sub.Subscribe(context.Background(), "outbox")
	require.ErrorIs(t, err, source.ErrClosed)
}

// TestBudgetBoundsWhatIsHeld: with relay.max_in_flight_bytes at 16 KiB and
// rows of 4 KB, the bytes held (bridge_inflight_bytes, sampled all along)
// never pass the bound, and every row is relayed once: 200 swept rows
// (written before the slot) and 200 read from the slot, in commit order
// after them. With a bound of 1 byte, which no row fits, rows go one at a
// time and all are relayed too.
func TestBudgetBoundsWhatIsHeld(t *testing.T) {
	t.Parallel()
	for _, bound := range []int64{16 << 10, 1} {
		t.Run(strconv.FormatInt(bound, 10), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			ctx := context.Background()
			payload := make([]byte, 4000)
			insert := func(from, to int) {
				tx, err := e.prod.Begin()
				require.NoError(t, err)
				for i := from; i < to; i++ {
					_, err := tx.Exec(`INSERT INTO `+e.names.Table+` (idempotency_key, subject, payload) VALUES ($1, 'events.wal', $2)`, "k-"+strconv.Itoa(i), payload)
					require.NoError(t, err)
				}
				require.NoError(t, tx.Commit())
			}
			insert(0, 200)
			bridgetest.DropSlot(t, e.url, e.names.Slot) // the slot will not deliver these: swept
			_, _, err := postgreswal.Setup(ctx, e.db.SQL, e.names)
			require.NoError(t, err)

			r := e.relay(t, source.LogDelivery{MaxInFlightBytes: bound, SweepInterval: 100 * time.Millisecond})
			var held prometheus.Collector
			for _, c := range r.sub.Collectors() {
				if g, ok := c.(prometheus.GaugeFunc); ok && strings.Contains(g.Desc().String(), `"bridge_inflight_bytes"`) {
					held = g
				}
			}
			require.NotNil(t, held)
			var most float64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					most = max(most, testutil.ToFloat64(held))
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			for i := 200; i < 400; i += 20 {
				insert(i, i+20)
			}
			e.waitDone(t, 400, 60*time.Second)
			close(stop)
			<-sampled
			t.Logf("bound %d B: at most %.0f B held", bound, most)
			require.Positive(t, most, "rows were held")
			require.LessOrEqual(t, most, float64(max(bound, int64(len(payload))+2)), "bytes held (one row when none fits)")
			require.Equal(t, int64(200), r.sub.Counters.Swept.Load())
			ids := e.streamIDsOf(t, "EVENTS")
			require.Len(t, ids, 400, "each row once")
			var fromSlot []int64
			for _, id := range ids {
				if id > 200 {
					fromSlot = append(fromSlot, id)
				}
			}
			require.True(t, slices.IsSorted(fromSlot), "the slot's rows in commit order")
		})
	}
}

// TestRowsWaitingAcrossASlotRecreatedAreSwept: rows read from the slot and
// not yet published (NATS is down) wait in the pipeline when the slot is
// dropped and created again under the running relay. The new slot starts
// after them and will never deliver them again, so the sweep publishes
// them: every row once, none left pending until the relay restarts.
func TestRowsWaitingAcrossASlotRecreatedAreSwept(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	r := e.relay(t, source.LogDelivery{SweepInterval: 200 * time.Millisecond})
	e.insertTx(t, 0, 0, 50, 0)
	e.waitDone(t, 50, 30*time.Second)

	e.nats.Stop()
	e.insertTx(t, 0, 50, 100, 0)
	deadline := time.Now().Add(30 * time.Second)
	for r.sub.Counters.Read.Load() < 100 {
		require.True(t, time.Now().Before(deadline), "%d of 100 rows read", r.sub.Counters.Read.Load())
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, 50, e.count(t, outbox.StatusPending), "the rows read wait for NATS")

	// The slot is dropped under the relay (its walsender ended first) and
	// created again: the new one starts after the 50 rows waiting.
	deadline = time.Now().Add(30 * time.Second)
	for {
		var dropped int
		_, err := e.prod.Exec(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active`, e.names.Slot)
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
		err = e.prod.QueryRow(`SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, e.names.Slot).Scan(&dropped)
		if err == nil && dropped == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "could not drop the slot: %v", err)
	}
	_, _, err := postgreswal.Setup(ctx, e.db.SQL, e.names)
	require.NoError(t, err)
	// NATS stays down until the relay streams from the new slot and its
	// pipeline has set the 50 rows aside for the new session (once the
	// outcomes in flight are in: within the ack deadline).
	deadline = time.Now().Add(30 * time.Second)
	for {
		var active bool
		require.NoError(t, e.prod.QueryRow(`SELECT active FROM pg_replication_slots WHERE slot_name = $1`, e.names.Slot).Scan(&active))
		if active {
			break
		}
		require.True(t, time.Now().Before(deadline), "the relay does not stream from the new slot")
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	require.Equal(t, 50, e.count(t, outbox.StatusPending), "the rows still wait for NATS")
	e.nats.Restart(t)
	e.insertTx(t, 0, 100, 150, 0) // delivered by the new slot

	e.waitDone(t, 150, 30*time.Second)
	require.Equal(t, int64(50), r.sub.Counters.Swept.Load(), "the rows waiting were swept")
	ids := e.streamIDs(t)
	require.Len(t, ids, 150, "each row once")
}

// TestOneBadRowIsSetAside: a row whose subject no stream captures, among
// 5,000 rows of other subjects committed after it and 50 rows of its own
// ordering key (half on a subject a stream captures, half on its own). The
// bad row is set aside (failed, retried by the sweep after its backoff):
// the other rows are relayed about as soon as they commit, the slot's
// confirmed position passes every one of them, the rows of its key wait
// (failed, none in a stream), and readiness names the rows set aside. Once
// a stream captures its subject, every row is in a stream once, and its
// key's rows follow it in id order.
func TestOneBadRowIsSetAside(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	r := e.relay(t, source.LogDelivery{MaxAttempts: 1000, SweepInterval: 500 * time.Millisecond})
	insert := func(tx *sql.Tx, key, subject, orderingKey string) int64 {
		var id int64
		ok := sql.NullString{String: orderingKey, Valid: orderingKey != ""}
		require.NoError(t, tx.QueryRow(`INSERT INTO `+e.names.Table+` (idempotency_key, subject, payload, ordering_key) VALUES ($1, $2, 'x', $3) RETURNING id`,
			key, subject, ok).Scan(&id))
		return id
	}
	tx, err := e.prod.Begin()
	require.NoError(t, err)
	bad := insert(tx, "bad", "other.bad", "k-bad")
	require.NoError(t, tx.Commit())
	poll := func(d time.Duration, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			require.True(t, time.Now().Before(deadline), "%s: not within %s", what, d)
			time.Sleep(20 * time.Millisecond)
		}
	}
	poll(10*time.Second, "the bad row set aside", func() bool { return e.count(t, outbox.StatusFailed) == 1 })

	const others, own = 5000, 50
	var followers []int64
	for i := 0; i < others; i += 100 {
		tx, err := e.prod.Begin()
		require.NoError(t, err)
		for j := i; j < i+100; j++ {
			insert(tx, "o-"+strconv.Itoa(j), "events.o", "k-"+strconv.Itoa(j%37))
			if j%100 == 0 && i/100 < own-5 {
				subject := "events.k"
				if len(followers)%2 == 1 {
					subject = "other.k"
				}
				followers = append(followers, insert(tx, "f-"+strconv.Itoa(len(followers)), subject, "k-bad"))
			}
		}
		require.NoError(t, tx.Commit())
		if i%1000 == 0 { // and five in transactions of their own
			tx, err := e.prod.Begin()
			require.NoError(t, err)
			followers = append(followers, insert(tx, "f-"+strconv.Itoa(len(followers)), "events.k", "k-bad"))
			require.NoError(t, tx.Commit())
		}
	}
	require.Len(t, followers, own)
	var written string
	require.NoError(t, e.prod.QueryRow(`SELECT pg_current_wal_lsn()::text`).Scan(&written))

	// Every other row relayed; the slot confirms past all of them.
	poll(60*time.Second, "the other rows relayed", func() bool { return e.count(t, outbox.StatusDone) == others })
	var lag float64
	require.NoError(t, e.prod.QueryRow(`SELECT extract(epoch FROM max(relayed_at - created_at))::float8 FROM `+e.names.Table+` WHERE status = 'done'`).Scan(&lag))
	t.Logf("the other rows: relayed at most %.3f s after their transaction began", lag)
	// The old relay held every row after the bad one for its backoff
	// (here up to 500 ms, attempt after attempt): seconds and growing.
	require.Less(t, lag, 5.0, "rows of other subjects waited for the bad row")
	poll(20*time.Second, "the slot confirmed past the rows", func() bool {
		var past bool
		require.NoError(t, e.prod.QueryRow(`SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, e.names.Slot, written).Scan(&past))
		return past
	})

	// Its key's rows wait, set aside, none published; readiness says so.
	require.Equal(t, 1+own, e.count(t, outbox.StatusFailed))
	var waiting int
	require.NoError(t, e.prod.QueryRow(`SELECT count(*) FROM `+e.names.Table+` WHERE ordering_key = 'k-bad' AND status = 'failed' AND last_error LIKE $1`, fmt.Sprintf("waits for row %d %%", bad)).Scan(&waiting))
	require.Equal(t, own, waiting, "the followers say which row they wait for")
	poll(10*time.Second, "readiness names the rows set aside", func() bool {
		err := r.sub.Ready(ctx)
		return err != nil && strings.Contains(err.Error(), "1 rows set aside") && strings.Contains(err.Error(), fmt.Sprintf("row %d: no stream captures subject other.bad", bad)) &&
			strings.Contains(err.Error(), fmt.Sprintf("%d rows of their ordering keys wait", own))
	})
	require.True(t, health.IsDegraded(r.sub.Ready(ctx)), "set-aside rows degrade readiness, they do not fail it")
	var attempts int
	require.NoError(t, e.prod.QueryRow(`SELECT attempts FROM `+e.names.Table+` WHERE id = $1`, bad).Scan(&attempts))
	require.Greater(t, attempts, 1, "the bad row is retried by the sweep")
	require.Empty(t, e.streamIDsOf(t, "EVENTS")[others:], "no row of its key published")

	bridgetest.CreateStream(t, e.js, "OTHER", "other.>")
	poll(60*time.Second, "every row relayed", func() bool { return e.count(t, outbox.StatusDone) == others+1+own })
	poll(10*time.Second, "readiness clear", func() bool { return r.sub.Ready(ctx) == nil })

	// Once each; the key's rows in id order within each stream, and every
	// one stored after the bad row (by the time the server stored them):
	// a row back from being set aside is handed over alone. (Across two
	// streams the server may store back-to-back publishes in either order.)
	stored := map[int64]time.Time{}
	byStream := map[string][]int64{}
	for _, name := range []string{"EVENTS", "OTHER"} {
		for _, m := range bridgetest.Messages(t, e.js, name) {
			id, err := strconv.ParseInt(m.Headers().Get("Outbox-Id"), 10, 64)
			require.NoError(t, err)
			_, twice := stored[id]
			require.False(t, twice, "row %d stored twice", id)
			md, err := m.Metadata()
			require.NoError(t, err)
			stored[id] = md.Timestamp
			if m.Headers().Get("Outbox-Ordering-Key") == "k-bad" || id == bad || slices.Contains(followers, id) {
				byStream[name] = append(byStream[name], id)
			}
		}
	}
	require.Len(t, stored, others+1+own)
	for name, ids := range byStream {
		require.True(t, slices.IsSorted(ids), "%s: the rows of k-bad out of id order: %v", name, ids)
	}
	require.Equal(t, bad, byStream["OTHER"][0])
	for _, f := range followers {
		require.True(t, stored[f].After(stored[bad]), "row %d of k-bad stored before the bad row %d", f, bad)
	}
}

// TestSetAsideKeyWaitsThroughAnOutage: a row set aside (no stream captures
// its subject), then NATS stopped; a row of another key fails for the
// outage and holds the queue, and a later row of the set-aside row's key is
// read meanwhile (queued in the window, not yet handed over). The sweep
// brings the set-aside row back during the outage, behind it in the
// window. Once NATS is back, with a stream for the subject, the later row
// of its key still goes after it (found by a saboteur: it went first).
func TestSetAsideKeyWaitsThroughAnOutage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.relay(t, source.LogDelivery{MaxAttempts: 1000, SweepInterval: 200 * time.Millisecond, BackoffInitial: 2 * time.Second, BackoffMax: 2 * time.Second})
	insert := func(key, subject, orderingKey string) int64 {
		var id int64
		require.NoError(t, e.prod.QueryRow(`INSERT INTO `+e.names.Table+` (idempotency_key, subject, payload, ordering_key) VALUES ($1, $2, 'x', $3) RETURNING id`,
			key, subject, orderingKey).Scan(&id))
		return id
	}
	bad := insert("bad", "other.k", "K")
	e.untilMarked(t, 10*time.Second, func() bool { return e.count(t, outbox.StatusFailed) >= 1 }, "the bad row set aside")
	e.nats.Stop()
	insert("g", "events.g", "G")
	later := insert("later", "events.k", "K")
	time.Sleep(5 * time.Second) // past the bad row's backoff: the sweep brings it back
	e.nats.Restart(t)
	_, e.js = e.nats.JetStream(t)
	// The queue goes on as NATS is back; the bad row fails once more,
	// with no stream yet: the later row of its key must not go first.
	time.Sleep(2 * time.Second)
	bridgetest.CreateStream(t, e.js, "OTHER", "other.>")
	e.waitDone(t, 3, 60*time.Second)
	at := map[int64]time.Time{}
	for _, name := range []string{"EVENTS", "OTHER"} {
		for _, m := range bridgetest.Messages(t, e.js, name) {
			id, err := strconv.ParseInt(m.Headers().Get("Outbox-Id"), 10, 64)
			require.NoError(t, err)
			md, err := m.Metadata()
			require.NoError(t, err)
			at[id] = md.Timestamp
		}
	}
	require.Len(t, at, 3, "each row once")
	require.True(t, at[later].After(at[bad]), "row %d of key K stored before row %d", later, bad)
}

// TestSetAsideRowDeletedReleasesItsKey: a row set aside with a long
// backoff (20 s), ten later rows of its key waiting for it, and then an
// operator deletes it. The sweep finds it gone and makes the rows that
// waited for it due at once: they, and a row of the key committed after
// the delete, are relayed in id order long before the deleted row's
// backoff would have ended (found by a saboteur: they waited it out). The
// same after a restart between the wait and the delete: the rows read back
// from the table still know that they wait (a saboteur found them read
// back as failed rows of their own, each waiting out the old backoff).
func TestSetAsideRowDeletedReleasesItsKey(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "running", true: "after a restart"}[restart], func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			cfg := source.LogDelivery{MaxAttempts: 1000, SweepInterval: 500 * time.Millisecond, BackoffInitial: 20 * time.Second, BackoffMax: 20 * time.Second}
			r := e.relay(t, cfg)
			insert := func(key, subject string) int64 {
				var id int64
				require.NoError(t, e.prod.QueryRow(`INSERT INTO `+e.names.Table+` (idempotency_key, subject, payload, ordering_key) VALUES ($1, $2, 'x', 'K') RETURNING id`,
					key, subject).Scan(&id))
				return id
			}
			wait := func(what string, cond func() bool) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for !cond() {
					require.True(t, time.Now().Before(deadline), "%s: not within 10 s", what)
					time.Sleep(20 * time.Millisecond)
				}
			}
			bad := insert("bad", "other.k")
			wait("the bad row set aside", func() bool { return e.count(t, outbox.StatusFailed) == 1 })
			var want []int64
			for i := range 10 {
				want = append(want, insert("f-"+strconv.Itoa(i), "events.k"))
			}
			wait("its key's rows waiting", func() bool { return e.count(t, outbox.StatusFailed) == 11 })
			if restart {
				r.stop()
				e.relay(t, cfg)
			}
			_, err := e.prod.Exec(`DELETE FROM `+e.names.Table+` WHERE id = $1`, bad)
			require.NoError(t, err)
			want = append(want, insert("late", "events.k"))
			// Well within the deleted row's 20 s backoff.
			wait("the rows of its key relayed", func() bool { return e.count(t, outbox.StatusDone) == 11 })
			require.Equal(t, want, e.streamIDsOf(t, "EVENTS"), "once each, in id order")
		})
	}
}
