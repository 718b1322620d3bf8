package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

func setup(t *testing.T, kind string) *outbox.Store {
	t.Helper()
	ctx := context.Background()
	_, table, store := bridgetest.Outbox(t, kind)
	again, err := outbox.Migrate(ctx, store.DB(), table)
	require.NoError(t, err)
	require.Empty(t, again, "a second migrate applies nothing")
	require.NoError(t, store.CheckSchema(ctx))
	return store
}

var (
	enqueue  = bridgetest.Enqueue
	get      = bridgetest.ReadRow
	kinds    = bridgetest.Kinds
	claimIDs = bridgetest.ClaimIDs
)

func TestMissingTableSaysMigrate(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			url := bridgetest.SQLiteURL(t)
			table := "outbox"
			switch kind {
			case "postgres":
				url, table = bridgetest.PostgresTable(t)
			case "mysql":
				url, table = bridgetest.MySQLTable(t)
			}
			db, err := outbox.Open(context.Background(), url)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			store, err := outbox.NewStore(db, table)
			require.NoError(t, err)
			err = store.CheckSchema(context.Background())
			require.ErrorIs(t, err, outbox.ErrNoTable)
			require.Contains(t, err.Error(), "bridge migrate")
		})
	}
}

// TestEnqueueRefusesInvalidEntries: Enqueue refuses what could never be
// published as given, and writes nothing.
func TestEnqueueRefusesInvalidEntries(t *testing.T) {
	t.Parallel()
	s := setup(t, "sqlite")
	for _, tc := range []struct {
		entry outbox.Entry
		want  string
	}{
		{outbox.Entry{IdempotencyKey: "nl\nkey", Subject: "events.t"}, `idempotency key "nl\nkey" contains the control character '\n'`},
		{outbox.Entry{IdempotencyKey: "tab\tkey", Subject: "events.t"}, "Outbox-Idempotency-Key header"},
		{outbox.Entry{IdempotencyKey: "k", Subject: "events.t", Headers: []byte(`{"Nats-Rollup": "all"}`)}, `header "Nats-Rollup" is reserved for the JetStream server`},
		{outbox.Entry{IdempotencyKey: "k", Subject: "events.*"}, "wildcard"},
	} {
		_, err := s.Enqueue(context.Background(), tc.entry)
		require.ErrorIs(t, err, outbox.ErrInvalidEntry, "%+v", tc.entry)
		require.ErrorContains(t, err, tc.want)
	}
	st, err := s.Stats(context.Background(), 0)
	require.NoError(t, err)
	require.Empty(t, st.Rows[outbox.StatusPending])
}

func TestOpenRefusesUnknownScheme(t *testing.T) {
	t.Parallel()
	_, err := outbox.Open(context.Background(), "mongodb://u:secret@h/db")
	require.ErrorIs(t, err, outbox.ErrUnknownScheme)
	require.Contains(t, err.Error(), "postgres://")
	require.NotContains(t, err.Error(), "secret")
}

func TestParseTableName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"outbox", "app.outbox", "_x1", "Outbox_2"} {
		_, err := outbox.ParseTableName(ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "out-box", "a.b.c", "1x", "x;drop table y", "a .b", `"x"`, strings.Repeat("x", 64)} {
		_, err := outbox.ParseTableName(bad)
		require.Error(t, err, bad)
	}
}

func TestFencingRejectsMarksOfALostLease(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, kind)
			id := enqueue(t, s, "k1", "")
			a, err := s.Claim(ctx, "relay-a", 10)
			require.NoError(t, err)
			require.Len(t, a, 1)

			// Relay A stalls past its lease (any age > 0 here; SQLite's
			// clock has millisecond steps); B takes the row over.
			bridgetest.WaitFor(t, 5*time.Second, func() bool {
				n, err := s.RequeueInflightOlderThan(ctx, 0)
				require.NoError(t, err)
				return n == 1
			})
			r := get(t, s, id)
			require.Equal(t, "failed", r.Status)
			require.Equal(t, "requeued after inflight timeout", r.LastError.String)
			require.False(t, r.Owner.Valid)
			require.Equal(t, 1, r.Attempts, "requeue keeps attempts")

			b, err := s.Claim(ctx, "relay-b", 10)
			require.NoError(t, err)
			require.Len(t, b, 1)
			require.Equal(t, 2, b[0].Attempt)

			// A wakes up: its marks match nothing.
			changed, err := s.MarkDone(ctx, "relay-a", []outbox.Done{{ID: id, Attempt: a[0].Attempt, Stream: "S", Seq: 1}}, false)
			require.NoError(t, err)
			require.Zero(t, changed)
			changed, err = s.MarkFailed(ctx, "relay-a", []outbox.Failure{{ID: id, Attempt: a[0].Attempt, Err: "late", Permanent: true}})
			require.NoError(t, err)
			require.Zero(t, changed)
			// Same owner name but an older claim (a restarted pod keeps its hostname): fenced too.
			changed, err = s.MarkDone(ctx, "relay-b", []outbox.Done{{ID: id, Attempt: a[0].Attempt, Stream: "S", Seq: 1}}, false)
			require.NoError(t, err)
			require.Zero(t, changed)

			changed, err = s.MarkDone(ctx, "relay-b", []outbox.Done{{ID: id, Attempt: b[0].Attempt, Stream: "S", Seq: 2}}, false)
			require.NoError(t, err)
			require.Equal(t, int64(1), changed)
			require.Equal(t, "done", get(t, s, id).Status)
		})
	}
}

func TestOrderingIsolation(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, kind)
			a1 := enqueue(t, s, "a1", "A")
			a2 := enqueue(t, s, "a2", "A")
			b1 := enqueue(t, s, "b1", "B")
			b2 := enqueue(t, s, "b2", "B")
			free := enqueue(t, s, "free", "")

			require.Equal(t, []int64{a1, b1, free}, claimIDs(t, s, "r"), "one row per key at a time")
			// a1 fails (retryable, backing off); b1 is done.
			_, err := s.MarkFailed(ctx, "r", []outbox.Failure{{ID: a1, Attempt: 1, Err: "no stream", Backoff: time.Hour}})
			require.NoError(t, err)
			_, err = s.MarkDone(ctx, "r", []outbox.Done{{ID: b1, Attempt: 1, Stream: "S", Seq: 1}, {ID: free, Attempt: 1, Stream: "S", Seq: 2}}, false)
			require.NoError(t, err)
			require.Equal(t, []int64{b2}, claimIDs(t, s, "r"), "a failed row blocks its own key only")
			r := get(t, s, a1)
			require.Equal(t, "failed", r.Status)
			require.True(t, r.Future, "available_at is pushed back by the backoff")

			// A dead letter does not block its key.
			_, err = s.MarkFailed(ctx, "r", []outbox.Failure{{ID: b2, Attempt: 1, Err: "x", Permanent: true}})
			require.NoError(t, err)
			_, err = s.DB().SQL.Exec("UPDATE " + s.Table() + " SET available_at = created_at WHERE id = " + fmt.Sprint(a1))
			require.NoError(t, err)
			require.Equal(t, []int64{a1}, claimIDs(t, s, "r"))
			_, err = s.MarkFailed(ctx, "r", []outbox.Failure{{ID: a1, Attempt: 2, Err: "poison", Permanent: true}})
			require.NoError(t, err)
			require.Equal(t, []int64{a2}, claimIDs(t, s, "r"))
		})
	}
}

func TestRetryAndPurge(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, kind)
			dead1, dead2, done := enqueue(t, s, "d1", ""), enqueue(t, s, "d2", ""), enqueue(t, s, "ok", "")
			require.Len(t, claimIDs(t, s, "r"), 3)
			_, err := s.MarkFailed(ctx, "r", []outbox.Failure{{ID: dead1, Attempt: 1, Err: "x", Permanent: true}, {ID: dead2, Attempt: 1, Err: "y", Permanent: true}})
			require.NoError(t, err)
			_, err = s.MarkDone(ctx, "r", []outbox.Done{{ID: done, Attempt: 1, Stream: "S", Seq: 9}}, false)
			require.NoError(t, err)

			n, err := s.RetryDead(ctx, []int64{dead1, done, 999})
			require.NoError(t, err)
			require.Equal(t, 1, n, "only dead letters move")
			r := get(t, s, dead1)
			require.Equal(t, "pending", r.Status)
			require.Zero(t, r.Attempts)
			n, err = s.RetryAllDead(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)

			n, err = s.PurgeDoneOlderThan(ctx, time.Hour, 10)
			require.NoError(t, err)
			require.Zero(t, n, "relayed just now")
			bridgetest.WaitFor(t, 5*time.Second, func() bool { // older than 0: once the clock ticked
				n, err := s.PurgeDoneOlderThan(ctx, 0, 1)
				require.NoError(t, err)
				return n == 1
			})
			st, err := s.Stats(ctx, 5)
			require.NoError(t, err)
			require.Equal(t, int64(2), st.Rows[outbox.StatusPending])
			require.Zero(t, st.Rows[outbox.StatusDone])
		})
	}
}

func TestLastErrorSurvivesAnyText(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, kind)
			id := enqueue(t, s, "k", "")
			require.Len(t, claimIDs(t, s, "r"), 1)
			nasty := "nul\x00byte, bad utf-8 \xff\xfe, " + strings.Repeat("é", 3000)
			n, err := s.MarkFailed(ctx, "r", []outbox.Failure{{ID: id, Attempt: 1, Err: nasty, Permanent: true}})
			require.NoError(t, err)
			require.Equal(t, int64(1), n)
			got := get(t, s, id).LastError.String
			require.True(t, strings.HasPrefix(got, `nul\x00byte, bad utf-8 \xff\xfe, éé`), got[:40])
			require.LessOrEqual(t, len(got), outbox.MaxErrorLen)
			require.True(t, strings.HasSuffix(got, "…"))
		})
	}
}
