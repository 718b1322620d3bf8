package forwarder_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source/table"
)

func TestTwoRelaysKeepPerKeyOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres")
	b.startRelay(t, "relay-a")
	b.startRelay(t, "relay-b")

	const rows, keys = 3000, 30
	for start := 0; start < rows; start += 100 {
		tx, err := b.prod.Begin()
		require.NoError(t, err)
		for i := start; i < start+100; i++ {
			var ok sql.NullString
			if i%7 != 0 { // every seventh row has no ordering key
				ok = sql.NullString{String: fmt.Sprintf("k%d", i%keys), Valid: true}
			}
			_, err := tx.Exec(b.insertSQL(), fmt.Sprintf("row-%d", i), "events.order", []byte(strconv.Itoa(i)), "{}", ok)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit())
	}
	b.waitDone(t, rows)

	msgs := bridgetest.Messages(t, b.js, "EVENTS")
	require.Len(t, msgs, rows)
	seen := map[string]bool{}
	last := map[string]int64{}
	keyOf := map[int64]sql.NullString{}
	q, err := b.db.SQL.Query("SELECT id, ordering_key, owner IS NULL FROM " + b.store.Table())
	require.NoError(t, err)
	defer q.Close()
	for q.Next() {
		var id int64
		var k sql.NullString
		var ownerCleared bool
		require.NoError(t, q.Scan(&id, &k, &ownerCleared))
		require.True(t, ownerCleared)
		keyOf[id] = k
	}
	require.NoError(t, q.Err())
	for _, m := range msgs {
		msgID := m.Headers().Get(jetstream.MsgIDHeader)
		require.False(t, seen[msgID], "doubled: %s", msgID)
		seen[msgID] = true
		id, err := strconv.ParseInt(m.Headers().Get("Outbox-Id"), 10, 64)
		require.NoError(t, err)
		if k := keyOf[id]; k.Valid {
			require.Greater(t, id, last[k.String], "key %s: row %d published after a later row", k.String, id)
			last[k.String] = id
		}
	}
	require.Len(t, last, keys)
}

func TestOutOfOrderCommitIsRelayed(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres")

	// tx1 takes the smaller id first and commits last.
	tx1, err := b.prod.Begin()
	require.NoError(t, err)
	_, err = tx1.Exec(b.insertSQL(), "first-id-last-commit", "events.x", []byte("1"), "{}", nil)
	require.NoError(t, err)
	_, err = b.prod.Exec(b.insertSQL(), "second-id-first-commit", "events.x", []byte("2"), "{}", nil)
	require.NoError(t, err)

	b.startRelay(t, "relay-1")
	b.waitDone(t, 1)
	require.NoError(t, tx1.Commit())
	b.waitDone(t, 2)

	msgs := bridgetest.Messages(t, b.js, "EVENTS")
	require.Len(t, msgs, 2)
	require.Equal(t, "second-id-first-commit", msgs[0].Headers().Get("Outbox-Idempotency-Key"))
	require.Equal(t, "first-id-last-commit", msgs[1].Headers().Get("Outbox-Idempotency-Key"))
}

func TestAlreadyPublishedKeyIsDeduplicated(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			ctx := context.Background()

			// An earlier publish of the same key (a crash between PubAck and mark).
			m := nats.NewMsg("events.dup")
			m.Data = []byte("first")
			m.Header.Set(jetstream.MsgIDHeader, outbox.MsgID("", "order-7"))
			ack, err := b.js.PublishMsg(ctx, m)
			require.NoError(t, err)

			_, err = b.store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "order-7", Subject: "events.dup", Payload: []byte("again")})
			require.NoError(t, err)
			_, err = b.store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "order-7", Subject: "events.dup", Payload: []byte("again")})
			require.ErrorIs(t, err, outbox.ErrAlreadyEnqueued)

			r := b.startRelay(t, "relay-1")
			b.waitDone(t, 1)
			// The counters move right after the mark commits.
			b.untilMarked(t, 5*time.Second, func() bool {
				return r.sub.Counters.Deduplicated.Load() == 1 && r.sub.Counters.Relayed.Load() == 1
			})

			msgs := bridgetest.Messages(t, b.js, "EVENTS")
			require.Len(t, msgs, 1)
			require.Equal(t, "first", string(msgs[0].Data()))

			var seq int64
			require.NoError(t, b.db.SQL.QueryRow("SELECT stream_seq FROM "+b.store.Table()).Scan(&seq))
			require.Equal(t, int64(ack.Sequence), seq, "a duplicate's row records the original's sequence")
		})
	}
}

func TestUserHeaderNamedLikeMsgIDDoesNotDedup(t *testing.T) {
	t.Parallel()
	// nats-server#3649: headers merely containing "Nats-Msg-Id" in their
	// name once triggered dedup. Two rows with distinct keys and the same
	// such header must both be stored.
	b := setup(t, "sqlite")
	ctx := context.Background()
	for i := range 2 {
		_, err := b.store.Enqueue(ctx, outbox.Entry{
			IdempotencyKey: fmt.Sprintf("k%d", i), Subject: "events.h", Payload: []byte("x"),
			Headers: []byte(`{"X-Nats-Msg-Id-Copy": "same", "My-Nats-Msg-Id": "same"}`),
		})
		require.NoError(t, err)
	}
	b.startRelay(t, "relay-1")
	b.waitDone(t, 2)
	msgs := bridgetest.Messages(t, b.js, "EVENTS")
	require.Len(t, msgs, 2)
	require.Equal(t, "same", msgs[1].Headers().Get("X-Nats-Msg-Id-Copy"))
}

// TestKeyWithControlCharactersIsRelayed: enqueue and the producer package
// refuse such keys, but a row written by other means is not a dead letter:
// its Nats-Msg-Id is derived from the exact key (hashed), and only the
// Outbox-Idempotency-Key header differs, as nats.go writes header values
// (CR and LF replaced by spaces, leading and trailing blanks trimmed).
func TestKeyWithControlCharactersIsRelayed(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	keys := map[string]string{"nl\nkey": "nl key", "cr\r\nkey": "cr  key", " tab\t": "tab"}
	for key := range keys {
		_, err := b.prod.Exec(b.insertSQL(), key, "events.k", []byte("x"), "{}", nil)
		require.NoError(t, err)
	}
	b.startRelay(t, "relay-1")
	b.waitDone(t, int64(len(keys)))
	msgs := bridgetest.Messages(t, b.js, "EVENTS")
	require.Len(t, msgs, len(keys))
	got := map[string]string{}
	for _, m := range msgs {
		got[m.Headers().Get(outbox.HeaderMsgID)] = m.Headers().Get(outbox.HeaderIdempotencyKey)
	}
	for key, header := range keys {
		id := outbox.MsgID("", key)
		require.True(t, strings.HasPrefix(id, "sha256:"), id)
		require.Contains(t, got, id, "key %q", key)
		require.Equal(t, header, got[id], "key %q", key)
	}
}

func TestRowsThatCannotBePublishedAreDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres")
	poison := map[string]struct{ subject, headers, want string }{
		"wildcard":      {"events.*", "{}", "wildcard"},
		"space":         {"events.bad subject", "{}", "whitespace"},
		"array headers": {"events.ok", "[1,2]", "JSON object"},
		"crlf value":    {"events.ok", `{"X-A": "v\r\nNats-Msg-Id: evil"}`, "CR, LF"},
		"bad name":      {"events.ok", `{"X A": "v"}`, "not allowed"},
		"reserved name": {"events.ok", `{"nats-msg-id": "evil"}`, "set by the relay"},
		"rollup":        {"events.ok", `{"Nats-Rollup": "all"}`, `header "Nats-Rollup" is reserved for the JetStream server`},
		"ttl":           {"events.ok", `{"nats-ttl": "1s"}`, `header "nats-ttl" is reserved`},
		"expected":      {"events.ok", `{"X-Ok": "1", "NATS-EXPECTED-STREAM": "OTHER"}`, "reserved for the JetStream server"},
		"number value":  {"events.ok", `{"X-N": 5}`, "neither a string"},
	}
	for key, p := range poison {
		// Poison rows share ordering keys with good rows: a dead letter
		// blocks nothing.
		_, err := b.prod.Exec(b.insertSQL(), key, p.subject, []byte("x"), p.headers, "k"+strconv.Itoa(len(key)%7))
		require.NoError(t, err)
	}
	// Over the server's max_payload (1 MiB by default).
	poison["max_payload"] = struct{ subject, headers, want string }{"events.big", "{}", "maximum payload"}
	_, err := b.prod.Exec(b.insertSQL(), "max_payload", "events.big", make([]byte, 1536*1024), "{}", nil)
	require.NoError(t, err)
	const good = 1000
	for i := range good {
		_, err := b.prod.Exec(b.insertSQL(), fmt.Sprintf("good-%d", i), "events.ok", []byte("x"), `{"X-Ok": ["1", "2"]}`, "k"+strconv.Itoa(i%7))
		require.NoError(t, err)
	}
	b.startRelay(t, "relay-1")
	b.waitDone(t, good)
	b.untilMarked(t, 10*time.Second, func() bool { return b.rows(t, outbox.StatusPermanentFailed) == int64(len(poison)) }, "every poison row a dead letter")

	for key, p := range poison {
		var lastError string
		require.NoError(t, b.db.SQL.QueryRow("SELECT last_error FROM "+b.store.Table()+" WHERE idempotency_key = $1", key).Scan(&lastError))
		require.Contains(t, lastError, p.want, key)
	}
	msgs := bridgetest.Messages(t, b.js, "EVENTS")
	require.Len(t, msgs, good)
	for _, m := range msgs {
		require.Contains(t, m.Headers().Get("Outbox-Idempotency-Key"), "good-")
		require.Equal(t, []string{"1", "2"}, m.Headers()["X-Ok"])
	}
}

func TestRetryableFailureHoldsBackItsKeyOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres")
	ctx := context.Background()
	// Key A publishes to a subject no stream covers yet; key B to EVENTS.
	for i := range 20 {
		_, err := b.prod.Exec(b.insertSQL(), fmt.Sprintf("a-%d", i), "audit.a", []byte(strconv.Itoa(i)), "{}", "A")
		require.NoError(t, err)
		_, err = b.prod.Exec(b.insertSQL(), fmt.Sprintf("b-%d", i), "events.b", []byte(strconv.Itoa(i)), "{}", "B")
		require.NoError(t, err)
	}
	b.startRelay(t, "relay-1")
	b.waitDone(t, 20) // all of B

	// a-0 keeps failing and being claimed again after its backoff, so at
	// any moment it is failed or in_flight; every later row of A is still
	// pending, never tried.
	var aDone, aTried, aWaiting int
	require.NoError(t, b.db.SQL.QueryRow("SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE attempts > 0), count(*) FILTER (WHERE status = 'pending' AND attempts = 0) FROM "+b.store.Table()+" WHERE ordering_key = 'A'").Scan(&aDone, &aTried, &aWaiting))
	require.Zero(t, aDone)
	require.Equal(t, 1, aTried, "only A's first row is tried")
	require.Equal(t, 19, aWaiting, "the others wait behind it")
	var aFirst string
	require.NoError(t, b.db.SQL.QueryRow("SELECT status FROM "+b.store.Table()+" WHERE idempotency_key = 'a-0'").Scan(&aFirst))
	require.Contains(t, []string{"failed", "in_flight"}, aFirst)
	var lastError string
	require.NoError(t, b.db.SQL.QueryRow("SELECT last_error FROM "+b.store.Table()+" WHERE idempotency_key = 'a-0'").Scan(&lastError))
	require.Contains(t, lastError, "no response from stream")

	_, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: "AUDIT", Subjects: []string{"audit.>"}})
	require.NoError(t, err)
	b.waitDone(t, 40)
	msgs := bridgetest.Messages(t, b.js, "AUDIT")
	require.Len(t, msgs, 20)
	for i, m := range msgs {
		require.Equal(t, strconv.Itoa(i), string(m.Data()), "A's rows arrive in order")
	}
}

func TestDeleteOnRelay(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			ctx := context.Background()
			for i := range 50 {
				_, err := b.store.Enqueue(ctx, outbox.Entry{IdempotencyKey: fmt.Sprint("d-", i), Subject: "events.d", Payload: []byte("x")})
				require.NoError(t, err)
			}
			r := b.startRelay(t, "relay-1", func(c *table.SubscriberConfig) { c.DeleteOnRelay = true })
			b.untilMarked(t, 30*time.Second, func() bool { return r.sub.Counters.Relayed.Load() == 50 }, "50 rows relayed")
			st, err := b.store.Stats(ctx, 0)
			require.NoError(t, err)
			for _, status := range outbox.Statuses {
				require.Zero(t, st.Rows[status], "no %s row left: relayed rows are deleted at their PubAck", status)
			}
			require.Len(t, bridgetest.Messages(t, b.js, "EVENTS"), 50)
		})
	}
}

// inDoubtRow enqueues a row of key whose earlier publish is in the stream
// (published now, before the row's mark) and makes it a dead letter first
// claimed a minute ago that `bridge retry` puts back: its attempts are
// reset to 0, its first_claimed_at is kept.
func (b *bundle) inDoubtRow(t *testing.T, key string) (id int64, seq uint64) {
	t.Helper()
	ctx := context.Background()
	m := nats.NewMsg("events.doubt")
	m.Data = []byte("first")
	m.Header.Set(jetstream.MsgIDHeader, outbox.MsgID("", key))
	ack, err := b.js.PublishMsg(ctx, m)
	require.NoError(t, err)
	id, err = b.store.Enqueue(ctx, outbox.Entry{IdempotencyKey: key, Subject: "events.doubt", Payload: []byte("again")})
	require.NoError(t, err)
	var first any = time.Now().Add(-time.Minute).UTC()
	q := "UPDATE " + b.store.Table() + " SET status = 'permanent_failed', attempts = 5, first_claimed_at = ? WHERE id = ?"
	switch b.db.Dialect() {
	case "postgres":
		q = "UPDATE " + b.store.Table() + " SET status = 'permanent_failed', attempts = 5, first_claimed_at = $1 WHERE id = $2"
	case "sqlite":
		first = first.(time.Time).Format("2006-01-02T15:04:05.000Z")
	case "mysql":
		first = first.(time.Time).Format("2006-01-02 15:04:05.000000")
	}
	_, err = b.db.SQL.Exec(q, first, id)
	require.NoError(t, err)
	n, err := b.store.RetryDead(ctx, []int64{id})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return id, ack.Sequence
}

// TestRetriedDeadLetterIsReconciled: a dead letter put back by `bridge
// retry` has its attempts reset, but it was claimed before — a minute ago,
// beyond the stream's 1 s duplicate window — and its earlier publish is in
// the stream. The relay finds it there by its claim history instead of
// publishing it again (which the stream would store twice).
func TestRetriedDeadLetterIsReconciled(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			ctx := context.Background()
			_, err := b.js.UpdateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: time.Second})
			require.NoError(t, err)
			id, seq := b.inDoubtRow(t, "order-9")
			// Sleeps on purpose: JetStream's duplicate window is measured in
			// time, and the row's first id must be forgotten by the stream
			// for a second publish to be stored twice.
			time.Sleep(1100 * time.Millisecond)
			rec := dedup.NewReconciler(b.js, testLogger(), dedup.ReconcilerConfig{PublishTimeout: 200 * time.Millisecond})
			b.startRelay(t, "relay-1", func(c *table.SubscriberConfig) { c.Reconciler = rec })
			b.waitDone(t, 1)
			require.Len(t, bridgetest.Messages(t, b.js, "EVENTS"), 1, "the retried row was published again")
			var got int64
			require.NoError(t, b.db.SQL.QueryRow("SELECT stream_seq FROM "+b.store.Table()+" WHERE id = "+strconv.FormatInt(id, 10)).Scan(&got))
			require.Equal(t, int64(seq), got)
			require.Equal(t, int64(1), rec.Reconciled.Load())
		})
	}
}

// TestRowInDoubtIsHeldWhenItsStreamCannotBeRead: whether a row in doubt was
// stored cannot be told (the JetStream API cannot be reached: here a
// connection closed for good), so the row is held back — failed, its attempt
// not counted, last_error saying why — rather than published again.
func TestRowInDoubtIsHeldWhenItsStreamCannotBeRead(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	id, _ := b.inDoubtRow(t, "order-10")
	nc, err := nats.Connect(b.nats.URL())
	require.NoError(t, err)
	closed, err := jetstream.New(nc)
	require.NoError(t, err)
	nc.Close()
	rec := dedup.NewReconciler(closed, testLogger(), dedup.ReconcilerConfig{PublishTimeout: 200 * time.Millisecond})
	b.startRelay(t, "relay-1", func(c *table.SubscriberConfig) { c.Reconciler = rec; c.HoldBack = time.Hour })
	var status, lastErr string
	var attempts int
	b.untilMarked(t, 10*time.Second, func() bool {
		var msg sql.NullString
		err := b.db.SQL.QueryRow("SELECT status, attempts, last_error FROM "+b.store.Table()+" WHERE id = ?", id).Scan(&status, &attempts, &msg)
		lastErr = msg.String
		return err == nil && status == "failed"
	}, "the row in doubt held back")
	require.Zero(t, attempts, "holding back does not count the attempt")
	require.Contains(t, lastErr, "in doubt, not published again: cannot tell whether the row's earlier publish is stored")
	require.Len(t, bridgetest.Messages(t, b.js, "EVENTS"), 1, "nothing published again")
}

// TestReconcileIsBoundedByTheLease: the JetStream API does not answer the
// reconcile (its connection is frozen), and each request would wait out
// the client's 5 s timeout, one row after another — longer than the lease,
// so that the rows would be requeued and claimed again and again. The
// reconcile stops at the lease's budget (inflight_timeout less
// ack_deadline) and holds the rows back.
func TestReconcileIsBoundedByTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	var ids []int64
	for i := range 5 {
		id, _ := b.inDoubtRow(t, fmt.Sprintf("bounded-%d", i))
		ids = append(ids, id)
	}
	proxy := bridgetest.StartProxy(t, b.nats.Server.Addr().String())
	nc, err := nats.Connect("nats://" + proxy.Addr())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	frozen, err := jetstream.New(nc)
	require.NoError(t, err)
	proxy.Freeze()
	rec := dedup.NewReconciler(frozen, testLogger(), dedup.ReconcilerConfig{PublishTimeout: 200 * time.Millisecond, Horizon: time.Second})
	r := b.startRelay(t, "relay-1", func(c *table.SubscriberConfig) {
		c.Reconciler, c.HoldBack = rec, time.Hour
		c.InflightTimeout, c.AckDeadline = 3*time.Second, 2*time.Second
	})
	b.untilMarked(t, 15*time.Second, func() bool {
		var n int
		err := b.db.SQL.QueryRow("SELECT COUNT(*) FROM " + b.store.Table() + " WHERE status = 'failed' AND last_error LIKE 'in doubt, not published again%'").Scan(&n)
		return err == nil && n == len(ids)
	}, "the rows in doubt were not held back")
	require.Zero(t, r.sub.Counters.Requeued.Load(), "a lease ran out during the reconcile")
	require.Len(t, bridgetest.Messages(t, b.js, "EVENTS"), len(ids), "nothing published again")
}
