package watermillforwarder

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
// relay.batch_size rows per transaction (at most BatchSize allows),
// relay.poll_interval between empty queries, relay.ack_deadline per
// message and relay.backoff_initial before a resend or a query after a
// database error.
func ProvideSubscriber(ctx context.Context, db *outbox.DB, cfg *config.Config, limit outbox.PayloadLimit, logger *slog.Logger) (*wmsql.Subscriber, error) {
	r := cfg.Relay
	batch := BatchSize(r.BatchSize, int64(r.MaxInFlightBytes), limit())
	if batch < r.BatchSize {
		logger.Info("watermill-forwarder source: fewer messages per batch than relay.batch_size, so that a batch of messages of the NATS server's max_payload fits relay.max_in_flight_bytes",
			slog.Int("batch_size", batch), slog.Int("relay_batch_size", r.BatchSize), slog.Int64("max_payload", limit()),
			slog.String("max_in_flight_bytes", r.MaxInFlightBytes.String()))
	}
	return NewSubscriber(ctx, db, SubscriberConfig{
		Topic:         cfg.Watermill.ForwarderTopic,
		BatchSize:     batch,
		PollInterval:  r.PollInterval,
		AckDeadline:   r.AckDeadline,
		RetryInterval: r.BackoffInitial,
	}, daemon.WatermillLogger(logger))
}

// BatchSize is the number of messages per batch of the watermill-forwarder
// source: batch (relay.batch_size), lowered so that a batch of messages of
// maxPayload bytes (the NATS server's max_payload; 0 when unknown) fits
// maxBytes (relay.max_in_flight_bytes), at least 1. watermill-sql reads a
// whole batch, payloads included, before it hands over its first message,
// and its query cannot leave a payload out: what the bridge table's claim
// does by bytes, this does by the largest message that can be published.
// A message over max_payload is still read, then skipped.
func BatchSize(batch int, maxBytes, maxPayload int64) int {
	if maxPayload <= 0 || maxBytes <= 0 {
		return batch
	}
	return int(min(int64(batch), max(1, maxBytes/maxPayload)))
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
		StreamSeen:    func(subject, stream string) { guard.Published(subject, stream); keeper.Published(subject, stream) },
		Admit:         guard.Admit,
		StreamMissing: keeper.Missing,
		Diagnose:      keeper.Diagnose,
	})
}
