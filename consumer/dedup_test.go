package consumer

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is one in-process NATS server with stream EVENTS on events.> (a
// 100 ms duplicate window, the minimum) and dedup bucket DEDUP.
type bundle struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	kv     jetstream.KeyValue
}

func setup(t *testing.T) *bundle {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoSigs: true, NoLog: true,
	})
	require.NoError(t, err)
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")

	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: 100 * time.Millisecond,
		Storage: jetstream.FileStorage,
	})
	require.NoError(t, err)
	kv, err := CreateBucket(t.Context(), js, "DEDUP", time.Hour)
	require.NoError(t, err)
	return &bundle{js: js, stream: stream, kv: kv}
}

// consume runs h on a durable pull consumer of EVENTS until the test ends.
func (b *bundle) consume(t *testing.T, name string, ackWait time.Duration, h jetstream.MessageHandler) jetstream.Consumer {
	t.Helper()
	cons, err := b.stream.CreateOrUpdateConsumer(t.Context(), jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
	})
	require.NoError(t, err)
	cc, err := cons.Consume(h)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Stop(); <-cc.Closed() })
	return cons
}

// publish stores one message; id "" publishes without Nats-Msg-Id.
func (b *bundle) publish(t *testing.T, id, data string) *jetstream.PubAck {
	t.Helper()
	msg := nats.NewMsg("events.order")
	msg.Data = []byte(data)
	if id != "" {
		msg.Header.Set(jetstream.MsgIDHeader, id)
	}
	ack, err := b.js.PublishMsg(t.Context(), msg)
	require.NoError(t, err)
	return ack
}

// republish publishes id again until the stream stores it as a new message,
// i.e. until the duplicate window of its first store has passed.
func (b *bundle) republish(t *testing.T, id, data string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.publish(t, id, data).Duplicate {
		require.True(t, time.Now().Before(deadline), "duplicate window did not pass")
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// waitSettled waits until the consumer has acked (or terminated) the first
// n stream messages and has nothing pending. It polls the server's view of
// the consumer: an ack reaches the server after the handler returned, and
// no client-side moment marks its arrival there.
func waitSettled(t *testing.T, cons jetstream.Consumer, n uint64) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := cons.Info(t.Context())
		return err == nil && info.AckFloor.Stream == n && info.NumAckPending == 0 && info.NumPending == 0
	}, 15*time.Second, 20*time.Millisecond, "consumer did not settle %d messages", n)
}

// recorder is a handler that records its runs.
type recorder struct {
	runs      atomic.Int64
	mu        sync.Mutex
	effects   []string // data of successful runs
	delivered []uint64 // NumDelivered of each run
	deadlines []bool   // whether each run's ctx had a deadline
	fail      func(run int64) error
}

func (r *recorder) handle(ctx context.Context, msg jetstream.Msg) error {
	run := r.runs.Add(1)
	md, err := msg.Metadata()
	if err != nil {
		return err
	}
	_, hasDeadline := ctx.Deadline()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delivered = append(r.delivered, md.NumDelivered)
	r.deadlines = append(r.deadlines, hasDeadline)
	if r.fail != nil {
		if err := r.fail(run); err != nil {
			return err
		}
	}
	r.effects = append(r.effects, string(msg.Data()))
	return nil
}

func (r *recorder) Effects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.effects...)
}

func (r *recorder) Delivered() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.delivered...)
}

var quiet = WithLogger(slog.New(slog.DiscardHandler))

// lostAck is a delivered message whose acks never reach the server, as when
// the connection drops them: the server redelivers after AckWait.
type lostAck struct{ jetstream.Msg }

func (lostAck) Ack() error                      { return nil }
func (lostAck) DoubleAck(context.Context) error { return nil }

// entryOf reads and decodes the dedup entry of id.
func (b *bundle) entryOf(t *testing.T, id string) entry {
	t.Helper()
	kve, err := b.kv.Get(t.Context(), Key(id))
	require.NoError(t, err)
	e, err := decodeEntry(kve.Value())
	require.NoError(t, err)
	return e
}

func TestDedupSkipsRepublishedCopy(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]Option{
		"without lease": {quiet},
		"with lease":    {quiet, WithProcessingLease(5 * time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.publish(t, "order-1", "order 1 created")
			b.republish(t, "order-1", "order 1 created")

			rec := &recorder{}
			cons := b.consume(t, "billing", 30*time.Second, Dedup(b.kv, rec.handle, opts...))
			waitSettled(t, cons, 2)

			require.Equal(t, []string{"order 1 created"}, rec.Effects())
			require.EqualValues(t, 1, rec.runs.Load())
			e := b.entryOf(t, "order-1")
			require.Equal(t, "order-1", e.MsgID)
			require.Equal(t, "EVENTS", e.Stream)
			require.EqualValues(t, 1, e.StreamSeq)
		})
	}
}

func TestDedupSkipsRedeliveryAfterLostAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.publish(t, "order-1", "order 1 created")

	rec := &recorder{}
	h := Dedup(b.kv, rec.handle, quiet)
	var deliveries atomic.Int64
	cons := b.consume(t, "billing", 500*time.Millisecond, func(msg jetstream.Msg) {
		if deliveries.Add(1) == 1 {
			h(lostAck{msg}) // processed, but the ack is lost
			return
		}
		h(msg)
	})
	waitSettled(t, cons, 1)

	require.EqualValues(t, 2, deliveries.Load(), "the server redelivers after AckWait")
	require.Equal(t, []string{"order 1 created"}, rec.Effects())
	require.Equal(t, []uint64{1}, rec.Delivered(), "the handler ran on the first delivery only")
}

func TestDedupRunsFailedMessageAgain(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]func(run int64) error{
		"error": func(run int64) error {
			if run == 1 {
				return errors.New("database unavailable")
			}
			return nil
		},
		"panic": func(run int64) error {
			if run == 1 {
				panic("nil map")
			}
			return nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.publish(t, "order-1", "order 1 created")

			rec := &recorder{fail: fail}
			cons := b.consume(t, "billing", 30*time.Second, Dedup(b.kv, rec.handle, quiet))
			waitSettled(t, cons, 1)
			require.EqualValues(t, 2, rec.runs.Load(), "the nakked message runs again")
			require.Equal(t, []uint64{1, 2}, rec.Delivered())
			require.Equal(t, []string{"order 1 created"}, rec.Effects())

			// A later copy is still recognized after the successful run.
			b.republish(t, "order-1", "order 1 created")
			waitSettled(t, cons, 2)
			require.EqualValues(t, 2, rec.runs.Load())
			require.Equal(t, []string{"order 1 created"}, rec.Effects())
		})
	}
}

func TestDedupWithoutMsgID(t *testing.T) {
	t.Parallel()

	t.Run("passed through", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.publish(t, "", "no id 1")
		b.publish(t, "", "no id 2")

		rec := &recorder{}
		cons := b.consume(t, "billing", 30*time.Second, Dedup(b.kv, rec.handle, quiet))
		waitSettled(t, cons, 2)
		require.Equal(t, []string{"no id 1", "no id 2"}, rec.Effects())
		_, err := b.kv.Keys(t.Context())
		require.ErrorIs(t, err, jetstream.ErrNoKeysFound, "no dedup entry written")
	})

	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.publish(t, "", "no id")
		b.publish(t, "order-1", "order 1 created")

		rec := &recorder{}
		cons := b.consume(t, "billing", 30*time.Second, Dedup(b.kv, rec.handle, quiet, RequireMsgID()))
		waitSettled(t, cons, 2)
		require.Equal(t, []string{"order 1 created"}, rec.Effects(), "the message without id is terminated")
	})
}

// abandon writes the "processing" entry a consumer leaves when it crashes
// after its claim and before its handler's side effect.
func (b *bundle) abandon(t *testing.T, id string) {
	t.Helper()
	_, err := b.kv.Create(t.Context(), Key(id), newEntry(stateProcessing, id, nil).encode())
	require.NoError(t, err)
}

func TestDedupWithoutLeaseSkipsAbandonedEntry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.abandon(t, "order-1")
	b.publish(t, "order-1", "order 1 created")

	rec := &recorder{}
	cons := b.consume(t, "billing", 30*time.Second, Dedup(b.kv, rec.handle, quiet))
	waitSettled(t, cons, 1)
	require.Zero(t, rec.runs.Load(), "the documented window: acked although never processed")
}

func TestDedupLeaseTakesOverAbandonedEntry(t *testing.T) {
	t.Parallel()
	const lease = 500 * time.Millisecond
	b := setup(t)
	b.abandon(t, "order-1")
	b.publish(t, "order-1", "order 1 created")

	rec := &recorder{}
	var deliveries atomic.Int64
	h := Dedup(b.kv, rec.handle, quiet, WithProcessingLease(lease))
	cons := b.consume(t, "billing", 30*time.Second, func(msg jetstream.Msg) {
		deliveries.Add(1)
		h(msg)
	})
	waitSettled(t, cons, 1)

	require.Equal(t, []string{"order 1 created"}, rec.Effects())
	require.GreaterOrEqual(t, deliveries.Load(), int64(2), "held while the lease was young")
	require.NotEqual(t, []uint64{1}, rec.Delivered(), "not run on the first delivery")
	rec.mu.Lock()
	require.Equal(t, []bool{true}, rec.deadlines, "the handler's ctx ends with the lease")
	rec.mu.Unlock()
	require.Equal(t, stateDone, b.entryOf(t, "order-1").State)

	// A done entry is not taken over, however old.
	b.republish(t, "order-1", "order 1 created")
	waitSettled(t, cons, 2)
	require.EqualValues(t, 1, rec.runs.Load())
}

func TestDedupLeaseReleasesFailedRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.publish(t, "order-1", "order 1 created")

	rec := &recorder{fail: func(run int64) error {
		if run == 1 {
			return errors.New("database unavailable")
		}
		return nil
	}}
	cons := b.consume(t, "billing", 30*time.Second,
		Dedup(b.kv, rec.handle, quiet, WithProcessingLease(time.Minute), WithNakDelay(50*time.Millisecond)))
	waitSettled(t, cons, 1)
	require.EqualValues(t, 2, rec.runs.Load(), "rerun at once, not after the lease")
	require.Equal(t, []string{"order 1 created"}, rec.Effects())
	require.Equal(t, stateDone, b.entryOf(t, "order-1").State)
}

func TestDedupNaksWhileBucketUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.js.DeleteKeyValue(t.Context(), "DEDUP"))
	b.publish(t, "order-1", "order 1 created")

	rec := &recorder{}
	var deliveries atomic.Int64
	h := Dedup(b.kv, rec.handle, quiet, WithTimeout(time.Second))
	cons := b.consume(t, "billing", 30*time.Second, func(msg jetstream.Msg) {
		deliveries.Add(1)
		h(msg)
	})
	// The redelivery is the server's doing, with no moment the client marks: polled.
	require.Eventually(t, func() bool { return deliveries.Load() >= 2 }, 15*time.Second, 20*time.Millisecond,
		"the message is nakked and redelivered")
	require.Zero(t, rec.runs.Load(), "no handler run without a claim")

	_, err := CreateBucket(t.Context(), b.js, "DEDUP", time.Hour)
	require.NoError(t, err)
	waitSettled(t, cons, 1)
	require.Equal(t, []string{"order 1 created"}, rec.Effects())
}

func TestCreateBucket(t *testing.T) {
	t.Parallel()
	b := setup(t)

	_, err := CreateBucket(t.Context(), b.js, "DEDUP", time.Hour)
	require.NoError(t, err, "same configuration again")
	_, err = CreateBucket(t.Context(), b.js, "DEDUP", 2*time.Hour)
	require.ErrorIs(t, err, jetstream.ErrBucketExists)
	_, err = CreateBucket(t.Context(), b.js, "OTHER", 0)
	require.ErrorIs(t, err, ErrInvalidConfig)

	st, err := b.kv.Status(t.Context())
	require.NoError(t, err)
	require.Equal(t, time.Hour, st.TTL())
	require.EqualValues(t, 1, st.History())
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, opt := range map[string]Option{
		"lease 0":          WithProcessingLease(0),
		"negative lease":   WithProcessingLease(-time.Second),
		"negative delay":   WithNakDelay(-time.Second),
		"timeout 0":        WithTimeout(0),
		"nil logger":       WithLogger(nil),
		"nil base context": WithBaseContext(nil), //nolint:staticcheck // the invalid value under test
	} {
		_, err := New(b.kv, opt)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		require.Panics(t, func() { Dedup(b.kv, (&recorder{}).handle, opt) }, name)
	}
	_, err := New(nil)
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	validKey := regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`) // nats.go jetstream kv.go validKeyRe

	// SHA-256 of the empty string, a published test vector.
	require.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", Key(""))
	seen := map[string]string{}
	for _, id := range []string{"order-1", "Order-1", "a b", "..", "tenant/orders.1", "sha256:ab", "é\x00\xff", string(make([]byte, 4096))} {
		k := Key(id)
		require.Regexp(t, validKey, k)
		require.Equal(t, k, Key(id), "deterministic")
		require.NotContains(t, seen, k, "ids %q and %q share a key", seen[k], id)
		seen[k] = id
		_, err := b.kv.Create(t.Context(), k, []byte("x"))
		require.NoError(t, err, "the server accepts the key of %q", id)
	}
}
