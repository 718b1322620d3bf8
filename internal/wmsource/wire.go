package wmsource

import (
	"context"
	"log/slog"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/google/wire"
	"github.com/nats-io/nats.go"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/daemon"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
)

// ProviderSet builds the watermill-forwarder source: watermill-sql's
// subscriber, the marshaler the sink.Publisher needs, and the forwarder.
var ProviderSet = wire.NewSet(ProvideSubscriber, ProvideMarshaler, ProvideForwarder)

// ProvideSubscriber reads watermill.forwarder_topic with
// relay.batch_size rows per transaction, relay.poll_interval between empty
// queries, relay.ack_deadline per message and relay.backoff_initial
// before a resend or a query after a database error.
func ProvideSubscriber(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) (*wmsql.Subscriber, error) {
	r := cfg.Relay
	return NewSubscriber(ctx, db, SubscriberConfig{
		Topic:         cfg.Watermill.ForwarderTopic,
		BatchSize:     r.BatchSize,
		PollInterval:  r.PollInterval,
		AckDeadline:   r.AckDeadline,
		RetryInterval: r.BackoffInitial,
	}, daemon.WatermillLogger(logger))
}

// ProvideMarshaler returns the Marshaler with dedup.namespace.
func ProvideMarshaler(cfg *config.Config) sink.Marshaler {
	return Marshaler{Namespace: cfg.Dedup.Namespace}
}

// ProvideForwarder builds the router, closing within shutdown_timeout.
// The guard learns every stream a PubAck names.
func ProvideForwarder(sub *wmsql.Subscriber, pub *sink.Publisher, nc *nats.Conn, guard *dedup.Guard, keeper *broker.Keeper, cfg *config.Config, logger *slog.Logger) (*Forwarder, error) {
	return New(sub, pub, logger, Config{
		Topic:         cfg.Watermill.ForwarderTopic,
		MsgIDMetadata: cfg.Watermill.MsgIDMetadata,
		CloseTimeout:  cfg.ShutdownTimeout,
		Connected:     nc.IsConnected,
		StreamSeen:    guard.Observe,
		Admit:         guard.Admit,
		StreamMissing: keeper.Missing,
	})
}
