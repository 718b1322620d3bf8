package broker_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/broker"
)

// TestEmbeddedServerLogsWhyAStreamCannotBeCreated: the client sees only
// error 10049 "error creating store for stream"; the cause is the server's
// to log, and the embedded server's warnings reach the relay's log.
func TestEmbeddedServerLogsWhyAStreamCannotBeCreated(t *testing.T) {
	t.Parallel()
	var logs bridgetest.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	dir := t.TempDir()
	e, err := broker.StartEmbedded("127.0.0.1:0", dir, logger)
	require.NoError(t, err)
	defer e.Shutdown()

	// A file where the stream's directory goes.
	streams := filepath.Join(dir, "jetstream", "$G", "streams")
	require.NoError(t, os.MkdirAll(streams, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(streams, "BROKEN"), nil, 0o644))

	nc, err := nats.Connect(e.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "BROKEN", Subjects: []string{"broken.>"}})
	require.ErrorContains(t, err, "error creating store for stream")

	out := logs.String()
	assert.Contains(t, out, "level=WARN")
	assert.Contains(t, out, "component=nats-server")
	assert.Contains(t, out, "Stream create failed")
	assert.Contains(t, out, "storage directory is not a directory")
}
