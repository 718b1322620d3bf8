package forwarder_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
)

// chanSource is the least a source is: a message.Subscriber whose messages
// carry a source.Delivery. The test emits on it and reads the outcomes.
type chanSource struct {
	ch   chan *message.Message
	once sync.Once
}

func (s *chanSource) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	return s.ch, nil
}

func (s *chanSource) Close() error {
	s.once.Do(func() { close(s.ch) })
	return nil
}

// TestForwarderReportsTypedOutcomes: through the source seam, every
// delivery gets a typed outcome — a PubAck's stream and sequence (the
// original's for a duplicate), or the failure's class and error — and its
// message is acked when published and nacked when not, whichever source
// emitted it.
func TestForwarderReportsTypedOutcomes(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	nc, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	pub, err := sink.New(js, sink.Config{PublishTimeout: 2 * time.Second})
	require.NoError(t, err)
	refused := errors.New("stream HELD is unsafe")
	src := &chanSource{ch: make(chan *message.Message)}
	fwd, err := forwarder.New(src, "test", pub, testLogger(), forwarder.Config{
		CloseTimeout: 5 * time.Second,
		Connected:    nc.IsConnected,
		Admit: func(_ context.Context, subject string) error {
			if strings.HasPrefix(subject, "held.") {
				return refused
			}
			return nil
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fwd.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	<-fwd.Running()

	deliver := func(id, subject string, payload []byte) (source.Outcome, bool) {
		t.Helper()
		msg := message.NewMessage(id, payload)
		msg.SetContext(source.With(context.Background(), &source.Delivery{Subject: subject}))
		src.ch <- msg
		select {
		case <-msg.Acked():
			return source.OutcomeOf(msg), true
		case <-msg.Nacked():
			return source.OutcomeOf(msg), false
		case <-time.After(30 * time.Second):
			require.FailNow(t, "no ack or nack", "message %s", id)
			return source.Outcome{}, false
		}
	}

	out, acked := deliver("a", "events.a", []byte("a"))
	require.True(t, acked)
	require.Equal(t, source.Published("EVENTS", 1, false), out)

	out, acked = deliver("b", "events.b", []byte("b"))
	require.True(t, acked)
	require.Equal(t, source.Published("EVENTS", 2, false), out)

	out, acked = deliver("a", "events.a", []byte("a again"))
	require.True(t, acked)
	require.Equal(t, source.Published("EVENTS", 1, true), out, "a duplicate reports the original's sequence")

	out, acked = deliver("c", "nostream.c", []byte("c"))
	require.False(t, acked)
	require.False(t, out.Published)
	require.Equal(t, source.Retryable, out.Class)
	var noStream *forwarder.NoStreamError
	require.ErrorAs(t, out.Err, &noStream)
	require.Equal(t, "nostream.c", noStream.Subject)
	require.ErrorIs(t, out.Err, jetstream.ErrNoStreamResponse)

	out, acked = deliver("d", "events.d", make([]byte, nc.MaxPayload()+1))
	require.False(t, acked)
	require.Equal(t, source.Permanent, out.Class)
	require.ErrorIs(t, out.Err, nats.ErrMaxPayload)

	out, acked = deliver("e", "held.e", []byte("e"))
	require.False(t, acked)
	require.Equal(t, source.Held, out.Class)
	require.ErrorIs(t, out.Err, refused)
	require.Contains(t, out.Reason(), "attempt not counted")

	// A message without a delivery has no subject and nowhere to report:
	// it is nacked, a retryable failure that says so.
	bare := message.NewMessage("f", []byte("f"))
	src.ch <- bare
	select {
	case <-bare.Nacked():
	case <-bare.Acked():
		require.FailNow(t, "a message without a delivery was acked")
	case <-time.After(30 * time.Second):
		require.FailNow(t, "no ack or nack for a message without a delivery")
	}
	require.Equal(t, source.Retryable, source.OutcomeOf(bare).Class)

	info, err := js.Stream(context.Background(), "EVENTS")
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.CachedInfo().State.Msgs, "only a and b were stored")
}

// TestForwarderReportsEachRowAsItsOutcomeComes: the rows of one message
// are reported one by one as their PubAcks come, not when the slowest of
// the batch is done: a row whose PubAck never comes (its subject reaches a
// plain subscriber that does not answer) holds only itself, until its
// publish timeout makes it a retryable failure.
func TestForwarderReportsEachRowAsItsOutcomeComes(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	nc, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	silent, err := nc.SubscribeSync("silent.>") // receives, never answers
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Unsubscribe() })
	const publishTimeout = 3 * time.Second
	pub, err := sink.New(js, sink.Config{PublishTimeout: publishTimeout})
	require.NoError(t, err)
	src := &chanSource{ch: make(chan *message.Message)}
	fwd, err := forwarder.New(src, "test", pub, testLogger(), forwarder.Config{CloseTimeout: 10 * time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fwd.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	<-fwd.Running()

	subjects := []string{"events.a", "events.b", "silent.x"} // the silent one last: the batch waits on it
	reported := make(chan int, len(subjects))
	ds := make([]*source.Delivery, len(subjects))
	for i, subject := range subjects {
		m := nats.NewMsg(subject)
		m.Data = []byte(subject)
		m.Header.Set(jetstream.MsgIDHeader, subject)
		ds[i] = &source.Delivery{Subject: subject, Msg: m}
	}
	b := source.NewBatch(ds, func(i int) { reported <- i })
	msg := message.NewMessage("batch", nil)
	msg.SetContext(source.WithBatch(context.Background(), b))
	sent := time.Now()
	src.ch <- msg

	got := map[int]bool{}
	for len(got) < 2 {
		select {
		case i := <-reported:
			got[i] = true
		case <-time.After(publishTimeout - 500*time.Millisecond):
			require.FailNow(t, "the rows with a PubAck were not reported before the silent row's timeout", "reported: %v", got)
		}
	}
	require.Equal(t, map[int]bool{0: true, 1: true}, got, "the two rows of stream EVENTS first")
	for i := range 2 {
		out, ok := ds[i].Outcome()
		require.True(t, ok)
		require.True(t, out.Published, "%s: %+v", subjects[i], out)
	}
	_, ok := ds[2].Outcome()
	require.False(t, ok, "the silent row is still awaited")
	select {
	case <-msg.Acked():
		require.FailNow(t, "the message was acked before its last row's outcome")
	case <-msg.Nacked():
		require.FailNow(t, "the message was nacked before its last row's outcome")
	default:
	}

	select {
	case i := <-reported:
		require.Equal(t, 2, i)
	case <-time.After(publishTimeout + 10*time.Second):
		require.FailNow(t, "the silent row was never reported")
	}
	require.GreaterOrEqual(t, time.Since(sent), publishTimeout, "the silent row failed by its publish timeout")
	out, _ := ds[2].Outcome()
	require.Equal(t, source.Retryable, out.Class)
	require.ErrorIs(t, out.Err, jetstream.ErrAsyncPublishTimeout)
	select {
	case <-msg.Nacked():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "a message with a failed row is nacked")
	}
}
