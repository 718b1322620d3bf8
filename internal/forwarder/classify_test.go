package forwarder_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
)

// TestClassifyAgainstARealServer makes a real nats-server produce each
// failure and checks its class.
func TestClassifyAgainstARealServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	_, admin := n.JetStream(t)
	_, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: "SMALL", Subjects: []string{"small.>"}, MaxMsgSize: 100})
	require.NoError(t, err)
	_, err = admin.CreateStream(ctx, jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full.>"}, MaxMsgs: 1, Discard: jetstream.DiscardNew})
	require.NoError(t, err)
	_, err = admin.CreateStream(ctx, jetstream.StreamConfig{Name: "OK", Subjects: []string{"ok.>"}})
	require.NoError(t, err)

	nc, err := nats.Connect(n.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(time.Second))
	require.NoError(t, err)
	pub, err := sink.New(js, sink.Config{PublishTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })

	// A core subscriber on a subject no stream covers: no 503 comes back,
	// the publish times out (nats.go#1781).
	sub, err := nc.SubscribeSync("slow.x")
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	publish := func(subject string, size int, metadata ...string) error {
		msg := message.NewMessage("id-"+subject, bytes.Repeat([]byte("x"), size))
		for i := 0; i+1 < len(metadata); i += 2 {
			msg.Metadata.Set(metadata[i], metadata[i+1])
		}
		_, err := pub.PublishMsg(ctx, subject, msg)
		return err
	}
	_, err = pub.PublishMsg(ctx, "full.a", message.NewMessage("fill", []byte("x")))
	require.NoError(t, err)

	cases := []struct {
		name    string
		subject string
		size    int
		want    source.FailureClass
		// metadata: header name, value, … (the sink's default marshaler
		// copies metadata to headers).
		metadata []string
		code     jetstream.ErrorCode // the JetStream error code expected, if any
		// own: the server's answer ties the failure to the row
		// (forwarder.Own, after the keeper's Diagnose).
		own bool
	}{
		{"payload over max_payload", "ok.big", 2 << 20, source.Permanent, nil, 0, false},
		{"over the stream's max_msg_size", "small.a", 200, source.Permanent, nil, 0, true},
		{"no stream for the subject", "nostream.a", 10, source.Retryable, nil, 0, true},
		{"stream full with discard new", "full.b", 10, source.Retryable, nil, 0, true},
		// A timeout: the subject has a core subscriber and no stream.
		// The account lists no stream for it, but a timeout's message
		// may have reached one it does not list (an import, a
		// mapping): not the row's own.
		{"publish timeout", "slow.x", 10, source.Retryable, nil, 0, false},
		// 10111: the stream does not allow rollups.
		{"rollup not permitted", "ok.rollup", 10, source.Permanent, []string{"Nats-Rollup", "all"}, 10111, true},
		// 10166: the stream does not allow per-message TTLs.
		{"per-message TTL disabled", "ok.ttl", 10, source.Permanent, []string{"Nats-TTL", "1s"}, 10166, true},
	}
	keeper := broker.NewKeeper(js, nil, slog.New(slog.DiscardHandler))
	for _, c := range cases {
		err := publish(c.subject, c.size, c.metadata...)
		require.Error(t, err, c.name)
		require.Equal(t, c.want, forwarder.Classify(err), "%s: %v", c.name, err)
		require.Equal(t, c.own, forwarder.Own(keeper.Diagnose(ctx, c.subject, err)), "%s, its own: %v", c.name, err)
		if c.code != 0 {
			var apiErr *jetstream.APIError
			require.ErrorAs(t, err, &apiErr, c.name)
			require.Equal(t, c.code, apiErr.ErrorCode, "%s: %v", c.name, err)
		}
	}

	// The server stops: whatever the client reports, it is never permanent,
	// and a disconnect does not count as an attempt.
	disconnected := make(chan struct{})
	var once sync.Once
	nc.SetDisconnectErrHandler(func(*nats.Conn, error) { once.Do(func() { close(disconnected) }) })
	n.Stop()
	select {
	case <-disconnected:
	case <-time.After(5 * time.Second):
		t.Fatal("the client did not see the server stop")
	}
	err = publish("ok.a", 10)
	require.Error(t, err)
	require.Contains(t, []source.FailureClass{source.Unavailable, source.Retryable}, forwarder.Classify(err), "server stopped: %v", err)
	// A 503 no responders (which a subject without a stream also gets)
	// with the connection gone since: the server is not there to say
	// whose fault it was, and it may be everyone's.
	require.False(t, forwarder.Own(keeper.Diagnose(ctx, "nostream.a", jetstream.ErrNoStreamResponse)), "no responders, then disconnected")
	// A connection closed for good counts the attempt: the relay starts
	// again with a new one, and a row that closes every connection it is
	// sent on must become a dead letter.
	nc.Close()
	err = publish("ok.a", 10)
	require.Error(t, err)
	require.Equal(t, source.Retryable, forwarder.Classify(err), "connection closed: %v", err)
}

// TestOwnFailureNeedsTheServersAnswer: a 503 no responders is the row's
// own failure (no stream captures its subject) only when the server says
// so. A server whose JetStream does not serve — as while one shuts down:
// its streams stop before its connections close — answers no responders
// for every subject and 10039 or nothing to the API: every row's publish
// fails alike, and none is the row's own.
func TestOwnFailureNeedsTheServersAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) { o.JetStream = false })
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	keeper := broker.NewKeeper(js, nil, slog.New(slog.DiscardHandler))

	_, err = js.Publish(ctx, "events.a", []byte("x"))
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse, "a server without JetStream answers no responders")
	diagnosed := keeper.Diagnose(ctx, "events.a", err)
	require.False(t, forwarder.Own(diagnosed), "no stream the server named as missing: %v", diagnosed)
	require.False(t, forwarder.Own(forwarder.NoStream("events.a", diagnosed)), "said in words, still not the row's own")
	require.False(t, forwarder.Own(&broker.StreamUnavailableError{Stream: "EVENTS", Why: "no leader", Err: err}), "the broker's outage")
}

// TestEnsuredStreamMissingIsAnOutage: a stream the relay ensures that is
// gone (deleted, or memory storage lost in a server restart) answers 503
// for its subjects, as a subject no stream captures does. It is not the
// rows' own failure, which would set every row in flight aside and charge
// it while the keeper makes the stream again: the keeper makes it again
// at once and the failure is the stream's outage (the rows wait,
// uncharged); the next publish is stored.
func TestEnsuredStreamMissingIsAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	specs := []broker.StreamSpec{{Name: "MEM", Subjects: []string{"mem.>"}, Storage: "memory", Replicas: 1}}
	logger := slog.New(slog.DiscardHandler)
	require.NoError(t, broker.EnsureStreams(ctx, js, specs, logger))
	keeper := broker.NewKeeper(js, specs, logger)
	_, err := js.Publish(ctx, "mem.a", []byte("x"))
	require.NoError(t, err)

	require.NoError(t, js.DeleteStream(ctx, "MEM"))
	_, err = js.Publish(ctx, "mem.a", []byte("x"))
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
	diagnosed := keeper.Diagnose(ctx, "mem.a", err)
	require.ErrorIs(t, diagnosed, broker.ErrBrokerUnavailable, "an ensured stream missing is an outage: %v", diagnosed)
	require.Equal(t, source.Held, forwarder.Classify(diagnosed))
	require.False(t, forwarder.Own(diagnosed), "not the row's own")
	_, err = js.Publish(ctx, "mem.a", []byte("x"))
	require.NoError(t, err, "the keeper made the stream again")
}
