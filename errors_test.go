package bridge_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
	"github.com/outbox-bridge/bridge/internal/source/table"
	"github.com/outbox-bridge/bridge/internal/source/watermillforwarder"
)

// TestConfigErrorsWrapErrInvalid: every configuration error, a bad key of
// the configuration as much as a bad field given to a constructor, is
// errors.Is(err, config.ErrInvalid), keeps its "invalid config: <field>:"
// text, and is a configuration error of `bridge run` (exit status 2).
func TestConfigErrorsWrapErrInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := outbox.Open(ctx, bridgetest.SQLiteURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := outbox.NewStore(db, "outbox")
	require.NoError(t, err)

	cfg := config.Default()
	cfg.Relay.BatchSize = 0
	// The constructors validate their config before they use their other
	// arguments: the nil ones are never reached.
	for name, build := range map[string]func() error{
		"config.Validate": cfg.Validate,
		"table.NewSubscriber": func() error {
			_, err := table.NewSubscriber(store, logger, table.SubscriberConfig{})
			return err
		},
		"postgreswal.NewSubscriber": func() error {
			_, err := postgreswal.NewSubscriber(ctx, nil, nil, logger, postgreswal.Config{})
			return err
		},
		"watermillforwarder.NewSubscriber": func() error {
			_, err := watermillforwarder.NewSubscriber(ctx, nil, watermillforwarder.SubscriberConfig{}, watermill.NopLogger{})
			return err
		},
		"watermillforwarder.New": func() error {
			_, err := watermillforwarder.New(nil, nil, logger, watermillforwarder.Config{})
			return err
		},
		"sink.New": func() error {
			_, err := sink.New(nil, sink.Config{})
			return err
		},
		"dedup.NewGuard": func() error {
			_, err := dedup.NewGuard(nil, "sometimes", 0, nil, nil, logger)
			return err
		},
	} {
		err := build()
		require.Error(t, err, name)
		require.ErrorIs(t, err, config.ErrInvalid, name)
		require.ErrorContains(t, err, "invalid config: ", name)
		require.True(t, bridge.IsConfigError(err), "%s: %v", name, err)
	}
	require.False(t, errors.Is(outbox.ErrNoTable, config.ErrInvalid))
}

// TestSentinelsAcrossSources: a missing table is outbox.ErrNoTable for the
// table source and the watermill-forwarder source alike; a Subscribe after
// Close is source.ErrClosed (for source: postgres-wal, see
// postgreswal's TestSubscribeAfterClose).
func TestSentinelsAcrossSources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, name := bridgetest.PostgresTable(t)
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := outbox.NewStore(db, name)
	require.NoError(t, err)
	require.ErrorIs(t, store.CheckSchema(ctx), outbox.ErrNoTable, "source: table")
	require.ErrorIs(t, watermillforwarder.CheckTables(ctx, db, "no_such_topic"), outbox.ErrNoTable, "source: watermill-forwarder")

	sub, err := table.NewSubscriber(store, slog.New(slog.NewTextHandler(io.Discard, nil)), table.SubscriberConfig{Owner: "t"})
	require.NoError(t, err)
	require.NoError(t, sub.Close())
	_, err = sub.Subscribe(ctx, "outbox")
	require.ErrorIs(t, err, source.ErrClosed)
}

// TestMissingTablesAreToldBeforeNATS: for every source, a table that is not
// there is reported (outbox.ErrNoTable) before the relay contacts NATS —
// here a NATS URL where no server listens, which would otherwise be the
// error, after the relay had tried to create its streams.
func TestMissingTablesAreToldBeforeNATS(t *testing.T) {
	for _, src := range []string{config.SourceTable, config.SourcePostgresWAL, config.SourceWatermillForwarder} {
		t.Run(src, func(t *testing.T) {
			t.Parallel()
			url := bridgetest.PostgresURL(t)
			if src == config.SourcePostgresWAL {
				url = bridgetest.PostgresLogicalURL(t)
			}
			cfg := config.Default()
			cfg.Source = src
			cfg.Database.URL, cfg.Database.Table = url, "no_such_outbox"
			cfg.Watermill.ForwarderTopic = "no_such_topic"
			cfg.NATS.URL = "nats://127.0.0.1:1" // nothing listens there
			cfg.HTTP.Listen = "127.0.0.1:0"
			require.NoError(t, cfg.Validate())
			logger := slog.New(slog.DiscardHandler)
			hs, err := health.Listen(cfg.HTTP.Listen, logger)
			require.NoError(t, err)
			_, _, err = bridge.NewRelay(context.Background(), &cfg, logger, hs)
			require.ErrorIs(t, err, outbox.ErrNoTable, "the missing table, not NATS: %v", err)
		})
	}
}
