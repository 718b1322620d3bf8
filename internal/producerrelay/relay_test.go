package producerrelay_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/source/table"
	"github.com/outbox-bridge/bridge/producer"
)

// relayKinds are the databases the end-to-end tests run on: the relay's
// own tests cover every database; these show what a producer sees.
var relayKinds = []string{"sqlite", "postgres", "mysql"}

// relayBundle is an outbox table with a relay running over it into a NATS
// server with stream EVENTS on events.>.
type relayBundle struct {
	*bundle
	js    jetstream.JetStream
	marks *source.TestSignal[int] // the relay's writes of marks
}

func setupRelay(t *testing.T, kind string) *relayBundle {
	t.Helper()
	b := setup(t, kind)
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	marks := startRelay(t, b.store, n)
	return &relayBundle{bundle: b, js: js, marks: marks}
}

// startRelay runs a relay over store until the test ends, built as
// cmd/bridge builds it (see internal/forwarder's tests), and returns the
// signal of its writes of marks.
func startRelay(t *testing.T, store *outbox.Store, n *bridgetest.NATS) *source.TestSignal[int] {
	t.Helper()
	logger := testLogger()
	sub, err := table.NewSubscriber(store, logger, table.SubscriberConfig{
		Owner: "relay-1", BatchSize: 100, MaxInFlight: 100, PollInterval: 20 * time.Millisecond,
		BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		DrainTimeout: 5 * time.Second,
	})
	require.NoError(t, err)
	sub.Signals.Marked = source.NewTestSignal[int]()
	nc, err := nats.Connect(n.URL(), nats.MaxReconnects(-1))
	require.NoError(t, err)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second))
	require.NoError(t, err)
	pub, err := sink.New(js, sink.Config{Marshaler: forwarder.NewPublisherMarshaler()})
	require.NoError(t, err)
	fwd, err := forwarder.New(sub, store.Table(), pub, logger, forwarder.Config{CloseTimeout: 10 * time.Second, Connected: nc.IsConnected})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fwd.Run(ctx) }()
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
			nc.Close()
		})
	})
	return sub.Signals.Marked
}

func testLogger() *slog.Logger {
	if testing.Verbose() && os.Getenv("BRIDGE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// waitRelayed waits until n rows are done, then returns the stream's
// messages.
func (b *relayBundle) waitRelayed(t *testing.T, n int64) []jetstream.Msg {
	t.Helper()
	b.marks.WaitUntilWithin(t, 60*time.Second, func() bool {
		st, err := b.store.Stats(context.Background(), 0)
		require.NoError(t, err)
		return st.Rows[outbox.StatusDone] == n
	})
	return bridgetest.Messages(t, b.js, "EVENTS")
}

// TestRelayedOnlyWhenCommitted is the producer's promise end to end: a
// rolled-back Write is never published, a committed one is, and a key
// written again is reported as already enqueued and published once.
func TestRelayedOnlyWhenCommitted(t *testing.T) {
	for _, kind := range relayKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupRelay(t, kind)
			ctx := context.Background()

			tx, err := b.prod.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = b.w.Write(ctx, tx, producer.Event{Subject: "events.order.cancelled", Payload: []byte("never"), IdempotencyKey: "order-41-cancelled"})
			require.NoError(t, err)
			require.NoError(t, tx.Rollback())

			event := producer.Event{
				Subject:        "events.order.created",
				Payload:        []byte("{\"id\":42}\x00\xff"),
				Headers:        producer.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}},
				OrderingKey:    "order-42",
				IdempotencyKey: "order-42-created",
			}
			first := b.write(t, event)
			msgs := b.waitRelayed(t, 1)
			require.Len(t, msgs, 1, "the rolled-back event is not published")
			m := msgs[0]
			require.Equal(t, "events.order.created", m.Subject())
			require.Equal(t, event.Payload, m.Data())
			h := m.Headers()
			require.Equal(t, []string{"order-42-created"}, h[outbox.HeaderMsgID])
			require.Equal(t, []string{"order-42-created"}, h[outbox.HeaderIdempotencyKey])
			require.Equal(t, []string{"application/json"}, h["Content-Type"])
			require.Equal(t, []string{"a", "b"}, h["X-Multi"])
			require.Equal(t, []string{strconv.FormatInt(first[0].ID, 10)}, h[outbox.HeaderID])

			// The same key again, in a later transaction with a new event.
			again := b.write(t, event, producer.Event{Subject: "events.order.created", IdempotencyKey: "order-43-created"})
			require.True(t, again[0].AlreadyEnqueued)
			require.False(t, again[1].AlreadyEnqueued)
			msgs = b.waitRelayed(t, 2)
			require.Len(t, msgs, 2)
			var ids []string
			for _, m := range msgs {
				ids = append(ids, m.Headers().Get(outbox.HeaderMsgID))
			}
			require.Equal(t, []string{"order-42-created", "order-43-created"}, ids, "one message per key")
		})
	}
}

// TestRelayedFromPgx writes with a pgx transaction and checks the message.
func TestRelayedFromPgx(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "postgres")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = b.w.WritePgx(ctx, tx, producer.Event{Subject: "events.pgx", IdempotencyKey: "pgx-rolled-back"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	tx, err = conn.Begin(ctx)
	require.NoError(t, err)
	const spaced = "key with spaces"
	res, err := b.w.WritePgx(ctx, tx,
		producer.Event{Subject: "events.pgx", Payload: []byte("\x00pgx"), Headers: producer.Header{"X": {"1", "2"}}},
		producer.Event{Subject: "events.pgx", IdempotencyKey: spaced},
	)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	// Rows without an ordering key may arrive in any order.
	byKey := map[string]jetstream.Msg{}
	for _, m := range b.waitRelayed(t, 2) {
		byKey[m.Headers().Get(outbox.HeaderIdempotencyKey)] = m
	}
	require.Len(t, byKey, 2)
	m := byKey[res[0].IdempotencyKey]
	require.NotNil(t, m)
	require.Equal(t, []byte("\x00pgx"), m.Data())
	require.Equal(t, res[0].IdempotencyKey, m.Headers().Get(outbox.HeaderMsgID), "a UUIDv7 key is its own Nats-Msg-Id")
	require.Equal(t, []string{"1", "2"}, m.Headers()["X"])
	// A key that is not 1-128 bytes of visible ASCII is hashed (package doc).
	m = byKey[spaced]
	require.NotNil(t, m)
	sum := sha256.Sum256([]byte(spaced))
	require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), m.Headers().Get(outbox.HeaderMsgID))
}

// TestTraceContextReachesNATS: the headers InjectTraceContext writes arrive
// on the NATS message unchanged, and a consumer extracts the same span
// context from them.
func TestTraceContextReachesNATS(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupRelay(t, kind)
			state, err := trace.ParseTraceState("vendor=opaque,other=x")
			require.NoError(t, err)
			sc := trace.NewSpanContext(trace.SpanContextConfig{
				TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
				SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
				TraceFlags: trace.FlagsSampled,
				TraceState: state,
			})
			ctx := trace.ContextWithSpanContext(context.Background(), sc)

			h := producer.InjectTraceContext(ctx, producer.Header{"Content-Type": {"text/plain"}})
			b.write(t, producer.Event{Subject: "events.traced", Payload: []byte("hi"), Headers: h})

			msgs := b.waitRelayed(t, 1)
			require.Len(t, msgs, 1)
			got := msgs[0].Headers()
			require.Equal(t, []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, got["traceparent"])
			require.Equal(t, []string{"vendor=opaque,other=x"}, got["tracestate"])
			require.Equal(t, []string{"text/plain"}, got["Content-Type"])

			carrier := propagation.MapCarrier{"traceparent": got.Get("traceparent"), "tracestate": got.Get("tracestate")}
			extracted := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
			require.True(t, extracted.Equal(sc.WithRemote(true)), "consumer sees %v, producer had %v", extracted, sc)
		})
	}
}
