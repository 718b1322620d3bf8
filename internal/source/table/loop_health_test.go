package table_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/source/table"
)

// TestFailedClaimsWaitOutTheirBackoff: while every claim fails (here the
// table was dropped), notifications and settlements (Wake) do not cut the
// growing wait between claims short, and after three failures in a row
// Ready names the error. Before, a producer inserting every few
// milliseconds made the relay claim, fail and log at that rate.
func TestFailedClaimsWaitOutTheirBackoff(t *testing.T) {
	onEveryDatabase(t, failedClaimsWaitOutTheirBackoff)
}

// missingTable is how each database says that a table does not exist.
var missingTable = map[string]string{"sqlite": "no such table", "postgres": "does not exist", "mysql": "doesn't exist"}

func failedClaimsWaitOutTheirBackoff(t *testing.T, kind string) {
	store := setup(t, kind)
	_, err := store.DB().SQL.Exec("DROP TABLE " + store.Table())
	require.NoError(t, err)
	var logs bridgetest.SyncBuffer
	sub, err := table.NewSubscriber(store, slog.New(slog.NewJSONHandler(&logs, nil)), table.SubscriberConfig{
		Owner: "backoff", PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	_, err = sub.Subscribe(ctx, store.Table())
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sub.Close())
	})
	// 20, 40, 80, … 640 ms between claims: at most 9 claims in 2 s
	// however fast the machine, while Wake is called every millisecond.
	// This test sleeps on purpose: what it checks is a wait measured in
	// time (the backoff against the rate of Wake), which no signal stands
	// for.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		sub.Wake()
		time.Sleep(time.Millisecond)
	}
	failed := strings.Count(logs.String(), `"msg":"relay tick failed"`)
	require.GreaterOrEqual(t, failed, 3)
	require.LessOrEqual(t, failed, 9, "claims retried at the rate of Wake, not after their backoff")
	require.ErrorContains(t, sub.Ready(ctx), "claims failing")
	require.ErrorContains(t, sub.Ready(ctx), missingTable[kind])
}
