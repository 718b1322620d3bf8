package forwarder_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
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

	const ackDeadline = 300 * time.Millisecond
	sub, err := outbox.NewSubscriber(store, slog.New(slog.NewTextHandler(io.Discard, nil)),
		outbox.SubscriberConfig{Owner: "deadline-test", AckDeadline: ackDeadline, InflightTimeout: time.Second, PollInterval: 10 * time.Millisecond,
			BatchSize: 1}) // one row per message
	require.NoError(t, err)
	msgs, err := sub.Subscribe(ctx, store.Table())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })

	first, second := <-msgs, <-msgs // "on-time", then "late" (claimed in id order)
	_, err = pub.PublishMsg(ctx, source.Of(first).Subject, first)
	require.NoError(t, err, "a message on time is published")
	first.Ack()

	time.Sleep(ackDeadline + 100*time.Millisecond) // the relay "pauses"
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
