package sink_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/sink"
)

// TestTurnsKeepTheOrderOfConcurrentPublishes: messages published from
// goroutines that start in a random order are stored in the order of their
// turns.
func TestTurnsKeepTheOrderOfConcurrentPublishes(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	nc, js := n.JetStream(t)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second))
	require.NoError(t, err)
	pub, err := sink.New(js, sink.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })

	const total = 1000
	turns := make([]*sink.Turn, total)
	var prev *sink.Turn
	for i := range turns {
		turns[i] = sink.NewTurn(prev)
		prev = turns[i]
	}
	var wg sync.WaitGroup
	for _, i := range rand.Perm(total) {
		wg.Go(func() {
			msg := message.NewMessage(strconv.Itoa(i), []byte(strconv.Itoa(i)))
			_, err := pub.PublishMsg(sink.WithTurn(ctx, turns[i]), "s.a", msg)
			require.NoError(t, err)
		})
	}
	wg.Wait()

	var got []int
	for _, m := range bridgetest.Messages(t, js, "S") {
		i, err := strconv.Atoi(string(m.Data()))
		require.NoError(t, err)
		got = append(got, i)
	}
	require.Len(t, got, total)
	for k := 1; k < len(got); k++ {
		require.Less(t, got[k-1], got[k], "stored out of turn order at %d", k)
	}
}

// TestTurnNotSentRefusesTheRest: when one message of a chain is not handed
// over (here: given up before publishing), none after it is sent, however
// its goroutine is scheduled: the stream holds a prefix of the chain.
func TestTurnNotSentRefusesTheRest(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	nc, js := n.JetStream(t)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second))
	require.NoError(t, err)
	pub, err := sink.New(js, sink.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })

	const total, gap = 200, 120
	turns := make([]*sink.Turn, total)
	var prev *sink.Turn
	for i := range turns {
		turns[i] = sink.NewTurn(prev)
		prev = turns[i]
	}
	errs := make([]error, total)
	var wg sync.WaitGroup
	for _, i := range rand.Perm(total) {
		wg.Go(func() {
			if i == gap {
				turns[i].Pass(false) // refused before it reached the publisher
				return
			}
			_, errs[i] = pub.PublishMsg(sink.WithTurn(ctx, turns[i]), "s.a", message.NewMessage(strconv.Itoa(i), []byte(strconv.Itoa(i))))
		})
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case i < gap:
			require.NoError(t, err, "turn %d", i)
		case i > gap:
			require.ErrorIs(t, err, sink.ErrTurnBroken, "turn %d", i)
		}
	}
	require.True(t, turns[total-1].Broken())
	msgs := bridgetest.Messages(t, js, "S")
	require.Len(t, msgs, gap, "the turns before the gap, and none after")
	for k, m := range msgs {
		require.Equal(t, strconv.Itoa(k), string(m.Data()))
	}
}
