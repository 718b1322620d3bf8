package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestRetryNamesWhatItLeftAlone: `bridge retry --id` puts a dead letter back
// to pending, says which ids were not dead letters, and fails on an id
// with no row.
func TestRetryNamesWhatItLeftAlone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, key := range []string{"a", "b"} {
		r := runBridge(t, dir, nil, "enqueue", "--subject", "events.retry", "--key", key, "--data", "x")
		require.Equal(t, 0, r.code, "bridge enqueue\n%s", r)
	}
	ctx := context.Background()
	db, err := outbox.Open(ctx, "sqlite:"+filepath.Join(dir, "bridge-data", "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.SQL.Close() })
	store, err := outbox.NewStore(db, "outbox")
	require.NoError(t, err)
	_, err = db.SQL.ExecContext(ctx, "UPDATE outbox SET status = 'permanent_failed', last_error = 'stream missing' WHERE idempotency_key = 'a'")
	require.NoError(t, err)

	r := runBridge(t, dir, nil, "retry", "--id", "1", "--id", "2", "--id", "99", "--id", "1")
	require.Equal(t, 1, r.code, "an id without a row fails the command\n%s", r)
	require.Contains(t, r.stdout, "1 dead letters back to pending")
	require.Contains(t, r.stderr, "row 2 is pending, not a dead letter: left alone")
	require.Contains(t, r.stderr, "no row with id 99")

	st, ok, err := store.StatusOf(ctx, 1)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, outbox.StatusPending, st)

	r = runBridge(t, dir, nil, "retry", "--id", "2")
	require.Equal(t, 0, r.code, "a row in another state is left alone without failing\n%s", r)
	require.Contains(t, r.stdout, "0 dead letters back to pending")
}
