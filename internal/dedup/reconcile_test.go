package dedup_test

import (
	"context"
	"io"
	"log/slog"
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
		m.Header.Set(jetstream.MsgIDHeader, outbox.MsgID("", "k-"+strconv.Itoa(i)))
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

// publishWithID stores one message with the Nats-Msg-Id of key.
func publishWithID(t *testing.T, js jetstream.JetStream, subject, key string) *jetstream.PubAck {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, outbox.MsgID("", key))
	ack, err := js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
	return ack
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestReconcileLongSubjectKeepsTheConnection: a scan for a row whose
// subject is nearly as long as the relay allows, in a stream whose name
// makes the consumer's API subject longer than the server's control line
// would be with the subject in it (nats.go puts a consumer's only filter
// there), finds the row and leaves the connection up.
func TestReconcileLongSubjectKeepsTheConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	nc, js := n.JetStream(t)
	const stream = "LONG"
	subject := "l." + strings.Repeat("x", 4003-len(stream)-len("l."))
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"l.>"}, Duplicates: time.Second})
	require.NoError(t, err)
	first := time.Now()
	ack := publishWithID(t, js, subject, "long-1")
	publishWithID(t, js, "l.other", "other")

	r := dedup.NewReconciler(js, discard(), dedup.ReconcilerConfig{PublishTimeout: 200 * time.Millisecond})
	found, err := r.Reconcile(ctx, []dedup.Candidate{{ID: 1, IdempotencyKey: "long-1", Subject: subject,
		FirstClaimedAt: first, ClaimedAt: first.Add(5 * time.Second)}})
	require.NoError(t, err)
	require.Equal(t, dedup.Stored{Stream: stream, Seq: ack.Sequence}, found[1])
	require.True(t, nc.IsConnected(), "the connection was closed: %v", nc.LastError())
}

// TestReconcileFindsMappedAndTransformedSubjects: a subject the account
// maps to another (map.a → mapped.a) is stored under the mapped subject in a
// stream the JetStream API does not find by the row's subject; a stream
// with a subject transform (st.> → tr.>) stores it transformed. Rows in doubt
// of both are found in their streams, not published again.
func TestReconcileFindsMappedAndTransformedSubjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	require.NoError(t, n.Server.GlobalAccount().AddMapping("map.a", "mapped.a"))
	_, js := n.JetStream(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MAPPED", Subjects: []string{"mapped.>"}, Duplicates: time.Second})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "TRANSFORMED", Subjects: []string{"st.>"}, Duplicates: time.Second,
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "st.>", Destination: "tr.>"}})
	require.NoError(t, err)
	first := time.Now()
	mapped := publishWithID(t, js, "map.a", "m-1")
	require.Equal(t, "MAPPED", mapped.Stream)
	transformed := publishWithID(t, js, "st.a", "t-1")
	again := first.Add(5 * time.Second)
	cs := []dedup.Candidate{
		{ID: 1, IdempotencyKey: "m-1", Subject: "map.a", FirstClaimedAt: first, ClaimedAt: again},
		{ID: 2, IdempotencyKey: "t-1", Subject: "st.a", FirstClaimedAt: first, ClaimedAt: again},
	}

	// A relay that restarted: it has not published to map.a itself, and
	// finds MAPPED on a relayed row of the subject in its table.
	relayed := func(_ context.Context, subject string) (string, error) {
		if subject == "map.a" {
			return "MAPPED", nil
		}
		return "", nil
	}
	for name, cfg := range map[string]dedup.ReconcilerConfig{
		"relayed row": {PublishTimeout: 200 * time.Millisecond, Relayed: relayed},
		"PubAck":      {PublishTimeout: 200 * time.Millisecond, Routes: learned("map.a", "MAPPED")},
	} {
		r := dedup.NewReconciler(js, discard(), cfg)
		for _, c := range cs {
			in, err := r.InDoubt(ctx, c)
			require.NoError(t, err, name)
			require.True(t, in, "%s: %s is in doubt", name, c.Subject)
		}
		found, err := r.Reconcile(ctx, cs)
		require.NoError(t, err, name)
		require.Equal(t, dedup.Stored{Stream: "MAPPED", Seq: mapped.Sequence}, found[1], name)
		require.Equal(t, dedup.Stored{Stream: "TRANSFORMED", Seq: transformed.Sequence}, found[2], name)
	}

	// Found nowhere: not in doubt (nothing captures it), but counted.
	r := dedup.NewReconciler(js, discard(), dedup.ReconcilerConfig{PublishTimeout: 200 * time.Millisecond, Horizon: time.Second})
	in, err := r.InDoubt(ctx, cs[0])
	require.NoError(t, err)
	require.False(t, in)
	require.Equal(t, int64(1), r.Unresolved.Load())
}

func learned(subject, stream string) *dedup.Routes {
	r := dedup.NewRoutes()
	r.Learn(subject, stream)
	return r
}

// TestInDoubtCannotTell: when the stream cannot be read, a row claimed
// again within what the shortest admitted window covers is not in doubt; a
// row first claimed longer ago cannot be told (ErrCannotTell).
func TestInDoubtCannotTell(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	nc, js := n.JetStream(t)
	nc.Close()
	r := dedup.NewReconciler(js, discard(), dedup.ReconcilerConfig{PublishTimeout: time.Second, Horizon: 35 * time.Second})
	first := time.Now()
	in, err := r.InDoubt(context.Background(), dedup.Candidate{Subject: "events.x", FirstClaimedAt: first, ClaimedAt: first.Add(20 * time.Second)})
	require.NoError(t, err)
	require.False(t, in)
	_, err = r.InDoubt(context.Background(), dedup.Candidate{Subject: "events.x", FirstClaimedAt: first, ClaimedAt: first.Add(40 * time.Second)})
	require.ErrorIs(t, err, dedup.ErrCannotTell)
}
