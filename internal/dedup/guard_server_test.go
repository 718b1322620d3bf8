package dedup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/dedup"
)

func newGuard(t *testing.T, js jetstream.JetStream, routes *dedup.Routes, streams ...string) *dedup.Guard {
	t.Helper()
	g, err := dedup.NewGuard(js, dedup.GuardRefuse, 35*time.Second, streams, routes, discard())
	require.NoError(t, err)
	return g
}

// TestGuardForgetsADeletedStream: a stream found unsafe, then deleted and
// replaced by a safe one on its subjects: its verdict goes, and its rows go
// to the new stream.
func TestGuardForgetsADeletedStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "INT", Subjects: []string{"int.>"}, Retention: jetstream.InterestPolicy, Duplicates: time.Minute})
	require.NoError(t, err)
	g := newGuard(t, js, dedup.NewRoutes())
	var unsafe *dedup.UnsafeStreamError
	require.ErrorAs(t, g.Admit(ctx, "int.x"), &unsafe)
	require.Len(t, g.Unsafe(), 1)

	require.NoError(t, js.DeleteStream(ctx, "INT"))
	bridgetest.CreateStream(t, js, "INT2", "int.>")
	g.Run(runFor(t, 1500*time.Millisecond), time.Second) // one periodic check
	require.Empty(t, g.Unsafe(), "the deleted stream is still held back")
	require.Empty(t, g.Unchecked())
	require.NoError(t, g.Admit(ctx, "int.x"))
}

// runFor returns a context canceled after d, as a relay's is when it
// stops (canceled, not past a deadline: a request the cancel cuts short is
// not the stream's fault).
func runFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(d, cancel)
	t.Cleanup(cancel)
	return ctx
}

// TestGuardHoldsBackAMappedSubject: an account mapping (map.a → mapped.a)
// hides the stream of map.a from the JetStream API. Once a PubAck names
// it, the guard holds map.a back when that stream is unsafe.
func TestGuardHoldsBackAMappedSubject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	require.NoError(t, n.Server.GlobalAccount().AddMapping("map.a", "mapped.a"))
	_, js := n.JetStream(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MAPPED", Subjects: []string{"mapped.>"}, Duplicates: 5 * time.Second})
	require.NoError(t, err)
	g := newGuard(t, js, dedup.NewRoutes())
	require.NoError(t, g.Admit(ctx, "map.a"), "nothing known of map.a yet")
	g.Published("map.a", publishWithID(t, js, "map.a", "k").Stream)
	var unsafe *dedup.UnsafeStreamError
	require.ErrorAs(t, g.Admit(ctx, "map.a"), &unsafe)
	require.Equal(t, "MAPPED", unsafe.Stream)
}

// TestGuardSaysWhatItCannotCheck: a relay whose NATS user may not use the
// JetStream API publishes (a publish to a stream's subject needs no API
// permission) but cannot have its streams checked: the guard says so
// instead of reporting nothing.
func TestGuardSaysWhatItCannotCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "relay", Password: "pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"events.>"}}}},
			{Username: "admin", Password: "pw"},
		}
	})
	admin, err := nats.Connect("nats://admin:pw@" + srv.Addr().String())
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	ajs, err := jetstream.New(admin)
	require.NoError(t, err)
	bridgetest.CreateStream(t, ajs, "EVENTS", "events.>")
	nc, err := nats.Connect("nats://relay:pw@"+srv.Addr().String(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(500*time.Millisecond))
	require.NoError(t, err)

	g := newGuard(t, js, dedup.NewRoutes(), "EVENTS")
	g.Check(ctx)
	require.NoError(t, g.Admit(ctx, "events.x"), "a stream that cannot be checked is not held back")
	unchecked := strings.Join(g.Unchecked(), "; ")
	require.Contains(t, unchecked, "stream EVENTS: ")
	require.Contains(t, unchecked, "look up the stream of subject events.x: ")
	require.NotContains(t, unchecked, "context canceled")
}

// TestGuardReadinessFollowsAFixedStream: a stream found unsafe and then
// fixed by an operator stops being reported (readiness) within the
// recheck, not the periodic check's minute, even when none of its rows
// waits to be admitted.
func TestGuardReadinessFollowsAFixedStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	cfg := jetstream.StreamConfig{Name: "SHORT", Subjects: []string{"short.>"}, Duplicates: 5 * time.Second}
	_, err := js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	g := newGuard(t, js, dedup.NewRoutes(), "SHORT")
	g.Check(ctx)
	require.Len(t, g.Unsafe(), 1, "a 5s duplicate window against a 35s horizon")

	cfg.Duplicates = 2 * time.Minute
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	dedup.SetRecheck(g, 100*time.Millisecond)
	g.Run(runFor(t, time.Second), time.Hour) // no periodic check in the second
	require.Empty(t, g.Unsafe(), "the fixed stream is still reported unsafe")
}

// TestGuardReadinessFollowsAnAnsweringAPI: a subject whose stream could
// not be looked up (the relay's NATS user may not use the JetStream API)
// stops being reported once the API answers — here, once the user is
// allowed it — within the recheck, though no row of the subject waits to
// be admitted; and the stream found is inspected then. A PubAck naming the
// stream meanwhile does not clear it (the stream is not checked yet); a
// subject the client refuses to send to the API is not reported, nor does
// it keep the others from being looked up again.
func TestGuardReadinessFollowsAnAnsweringAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var opts *server.Options
	users := func(api bool) []*server.User {
		allow := []string{"events.>"}
		if api {
			allow = append(allow, "$JS.API.>")
		}
		return []*server.User{
			{Username: "relay", Password: "pw", Permissions: &server.Permissions{Publish: &server.SubjectPermission{Allow: allow}}},
			{Username: "admin", Password: "pw"},
		}
	}
	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) { o.Users, opts = users(false), o })
	admin, err := nats.Connect("nats://admin:pw@" + srv.Addr().String())
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	ajs, err := jetstream.New(admin)
	require.NoError(t, err)
	_, err = ajs.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: 5 * time.Second})
	require.NoError(t, err)
	nc, err := nats.Connect("nats://relay:pw@"+srv.Addr().String(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(500*time.Millisecond))
	require.NoError(t, err)

	g := newGuard(t, js, dedup.NewRoutes())
	for _, subject := range []string{"events.0 bad", "events.a", "events.b", "events.c", "events.d", "events.e"} {
		require.NoError(t, g.Admit(ctx, subject), "a subject whose stream cannot be looked up is not held back")
	}
	unchecked := strings.Join(g.Unchecked(), "; ")
	require.Contains(t, unchecked, "look up the stream of subject events.a: ")
	require.NotContains(t, unchecked, "events.d", "at most three subjects are named")
	require.Contains(t, unchecked, "and the lookups of 2 more subjects")
	require.NotContains(t, unchecked, "bad", "no answer of the API would change an invalid subject")
	require.Empty(t, g.Unsafe())
	g.Published("events.a", "EVENTS")
	require.Contains(t, strings.Join(g.Unchecked(), "; "), "subject events.a: ", "a PubAck cleared the finding with the stream unchecked")

	reload := opts.Clone()
	reload.Users = users(true)
	require.NoError(t, srv.ReloadOptions(reload))
	dedup.SetRecheck(g, 100*time.Millisecond)
	g.Run(runFor(t, 2*time.Second), time.Hour) // no periodic check, no row admitted
	require.Empty(t, g.Unchecked(), "the lookups still reported failed after the API answers")
	require.Len(t, g.Unsafe(), 1, "the stream found is inspected: a 5s duplicate window against a 35s horizon")
}
