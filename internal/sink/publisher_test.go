package sink_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/sink"
)

// panicky panics on the message with UUID "boom" and marshals the others.
type panicky struct{ sink.MetadataMarshaler }

func (p panicky) Marshal(subject string, msg *message.Message) (*nats.Msg, error) {
	if msg.UUID == "boom" {
		panic("marshaler bug")
	}
	return p.MetadataMarshaler.Marshal(subject, msg)
}

// TestPublisherSurvivesAPanicAndStopsOnClose: a panic while marshaling is
// that message's error and later messages are still published; after Close
// publishes fail with ErrClosed and the publisher's goroutine is gone.
func TestPublisherSurvivesAPanicAndStopsOnClose(t *testing.T) {
	n := bridgetest.StartNATS(t)
	nc, js := n.JetStream(t)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second))
	require.NoError(t, err)

	pub, err := sink.New(js, sink.Config{Marshaler: panicky{}})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = pub.PublishMsg(ctx, "s.a", message.NewMessage("boom", []byte("x")))
	require.ErrorContains(t, err, "panic: marshaler bug")

	ack, err := pub.PublishMsg(ctx, "s.a", message.NewMessage("fine", []byte("y")))
	require.NoError(t, err)
	require.Equal(t, uint64(1), ack.Sequence)

	require.NoError(t, pub.Close())
	require.NoError(t, pub.Close(), "Close is idempotent")
	_, err = pub.PublishMsg(ctx, "s.a", message.NewMessage("late", []byte("z")))
	require.True(t, errors.Is(err, sink.ErrClosed), "%v", err)
	select {
	case <-sink.WriterDone(pub):
	case <-time.After(5 * time.Second):
		t.Fatal("the writer goroutine still runs after Close")
	}
}

// TestPublishTimeoutAndTimerReuse: a publish whose PubAck never comes (a
// plain subscriber on a subject no stream covers: the server sends no
// "no responders" status) fails after PublishTimeout with
// jetstream.ErrAsyncPublishTimeout, twice in a row on reused timers, and a
// later publish to a stream is not cut short by a timer of an earlier one.
func TestPublishTimeoutAndTimerReuse(t *testing.T) {
	n := bridgetest.StartNATS(t)
	nc, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "S", "s.>")
	sub, err := nc.SubscribeSync("silent.x")
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.Flush())

	const timeout = 150 * time.Millisecond
	pub, err := sink.New(js, sink.Config{PublishTimeout: timeout})
	require.NoError(t, err)
	defer pub.Close()
	ctx := context.Background()
	for i := range 3 {
		start := time.Now()
		_, err := pub.PublishMsg(ctx, "silent.x", message.NewMessage(fmt.Sprintf("silent-%d", i), []byte("x")))
		require.ErrorIs(t, err, jetstream.ErrAsyncPublishTimeout, "publish %d", i)
		require.GreaterOrEqual(t, time.Since(start), timeout, "publish %d returned before its timeout", i)
	}
	for i := range 50 {
		ack, err := pub.PublishMsg(ctx, "s.a", message.NewMessage(fmt.Sprintf("ok-%d", i), []byte("y")))
		require.NoError(t, err, "publish %d", i)
		require.Equal(t, uint64(i+1), ack.Sequence)
	}
}
