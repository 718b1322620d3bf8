package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
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
	require.Contains(t, r.stdout, "1 dead letter back to pending")
	require.Contains(t, r.stderr, "row 2 is pending, neither failed nor a dead letter: left alone")
	require.Contains(t, r.stderr, "no row with id 99")

	st, ok, err := store.StatusOf(ctx, 1)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, outbox.StatusPending, st)

	r = runBridge(t, dir, nil, "retry", "--id", "2")
	require.Equal(t, 0, r.code, "a row in another state is left alone without failing\n%s", r)
	require.Contains(t, r.stdout, "0 dead letters back to pending")
}

// TestEnqueueKeyTooLongForMySQL: a key over the 255 bytes a MySQL/MariaDB
// table holds is bad input (exit 2), named with the limit, and nothing is
// inserted.
func TestEnqueueKeyTooLongForMySQL(t *testing.T) {
	t.Parallel()
	url, table, store := bridgetest.Outbox(t, "mysql")
	env := []string{"BRIDGE_DATABASE_URL=" + url, "BRIDGE_DATABASE_TABLE=" + table}
	for _, flag := range []string{"--key", "--ordering-key"} {
		r := runBridge(t, t.TempDir(), env, "enqueue", "--subject", "events.long", flag, strings.Repeat("k", 256), "--data", "x")
		require.Equal(t, 2, r.code, "bridge enqueue %s <256 bytes>\n%s", flag, r)
		require.Contains(t, r.stderr, "is 256 bytes")
		require.Contains(t, r.stderr, "at most 255 bytes")
	}
	st, err := store.Stats(context.Background(), 0)
	require.NoError(t, err)
	require.Zero(t, st.Rows[outbox.StatusPending], "nothing was inserted")
}

// TestStatusJSONOldestPending: oldest_pending_seconds is null without a
// pending row and a number with one.
func TestStatusJSONOldestPending(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runBridge(t, dir, nil, "migrate")
	require.Equal(t, 0, r.code, "bridge migrate\n%s", r)
	require.Contains(t, r.stdout, "applied migration 00001", "the first migrate of the embedded database says what it applied")
	oldest := func() any {
		r := runBridge(t, dir, nil, "status", "--json")
		require.Equal(t, 0, r.code, "bridge status --json\n%s", r)
		var doc map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), r.stdout)
		v, ok := doc["oldest_pending_seconds"]
		require.True(t, ok, "the key is always present\n%s", r.stdout)
		return v
	}
	require.Nil(t, oldest(), "no pending row")
	r = runBridge(t, dir, nil, "enqueue", "--subject", "events.s", "--data", "x")
	require.Equal(t, 0, r.code, "bridge enqueue\n%s", r)
	require.IsType(t, float64(0), oldest(), "one pending row")
}
