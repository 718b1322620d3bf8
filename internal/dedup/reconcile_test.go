package dedup_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/dedup"
)

func TestReconcileFindsStoredRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: time.Second})
	require.NoError(t, err)
	first := time.Now()
	const total = 3000
	for i := range total {
		m := nats.NewMsg("events.r." + strconv.Itoa(i%3))
		m.Header.Set(jetstream.MsgIDHeader, dedup.MsgID("", "k-"+strconv.Itoa(i)))
		_, err := js.PublishMsgAsync(m)
		require.NoError(t, err)
	}
	<-js.PublishAsyncComplete()

	r := dedup.NewReconciler(js, slog.New(slog.NewTextHandler(io.Discard, nil)), dedup.ReconcilerConfig{PublishTimeout: 200 * time.Millisecond})
	var cs []dedup.Candidate
	for i := 0; i < total; i += 30 { // stored
		cs = append(cs, dedup.Candidate{ID: int64(i), IdempotencyKey: "k-" + strconv.Itoa(i), Subject: "events.r." + strconv.Itoa(i%3),
			FirstClaimedAt: first, ClaimedAt: first.Add(5 * time.Second)})
	}
	cs = append(cs, dedup.Candidate{ID: -1, IdempotencyKey: "never-published", Subject: "events.r.0", FirstClaimedAt: first, ClaimedAt: first.Add(5 * time.Second)})
	in, err := r.InDoubt(ctx, cs[0])
	require.NoError(t, err)
	require.True(t, in, "claimed again 5 s after the first claim, with a 1 s window")
	fresh := cs[0]
	fresh.ClaimedAt = fresh.FirstClaimedAt
	in, err = r.InDoubt(ctx, fresh)
	require.NoError(t, err)
	require.False(t, in, "a first claim is never in doubt")
	homeless := cs[0]
	homeless.Subject = "nowhere.x"
	in, err = r.InDoubt(ctx, homeless)
	require.NoError(t, err, "a subject no stream captures is not an error")
	require.False(t, in, "nothing of a row whose subject no stream captures can be stored")

	found, err := r.Reconcile(ctx, cs)
	require.NoError(t, err)
	require.Len(t, found, len(cs)-1, "every stored row found, the unpublished one not")
	for _, c := range cs[:len(cs)-1] {
		require.Equal(t, "EVENTS", found[c.ID].Stream)
		require.Equal(t, uint64(c.ID+1), found[c.ID].Seq)
	}
}
