package broker_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/broker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestEnsureStreamsExistingStream: an existing stream is never changed;
// when it does not capture every requested subject, a warning names the
// subjects left out.
func TestEnsureStreamsExistingStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>", "audit.*")

	for _, tc := range []struct {
		name      string
		requested []string
		missing   []any // nil: covered, an INFO line
	}{
		{"same subjects", []string{"events.>", "audit.*"}, nil},
		{"subsets", []string{"events.order.created", "events.*", "events.a.>", "audit.login"}, nil},
		{"other subject", []string{"orders.>"}, []any{"orders.>"}},
		{"wider than the stream", []string{"events.a", "audit.>", "audit.x.y"}, []any{"audit.>", "audit.x.y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bridgetest.SyncBuffer
			logger := slog.New(slog.NewJSONHandler(&logs, nil))
			err := broker.EnsureStreams(ctx, js, []broker.StreamSpec{{Name: "EVENTS", Subjects: tc.requested}}, logger)
			require.NoError(t, err)

			records := logs.Records(t)
			require.Len(t, records, 1)
			r := records[0]
			require.Equal(t, "EVENTS", r["stream"])
			require.Equal(t, []any{"events.>", "audit.*"}, r["subjects"], "the stream's own subjects")
			if tc.missing == nil {
				require.Equal(t, "INFO", r["level"])
				require.Equal(t, "stream present", r["msg"])
				return
			}
			require.Equal(t, "WARN", r["level"])
			require.Contains(t, r["msg"], "does not change existing streams")
			require.Equal(t, tc.missing, r["subjects_not_covered"])
		})
	}

	s, err := js.Stream(ctx, "EVENTS")
	require.NoError(t, err)
	require.Equal(t, []string{"events.>", "audit.*"}, s.CachedInfo().Config.Subjects, "the stream was not changed")
}
