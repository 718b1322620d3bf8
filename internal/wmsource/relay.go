package wmsource

import (
	"context"
	"errors"
	"log/slog"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Relay is the daemon of `bridge run` with source: watermill-forwarder.
type Relay struct {
	Forwarder *Forwarder
	Guard     *dedup.Guard
	Health    *health.Server
	DB        *outbox.DB
	Streams   broker.Streams
	Config    *config.Config
	Logger    *slog.Logger
}

// Run relays until ctx ends, then stops: /readyz turns 503 at once, the
// subscriber commits the offset of the messages published, and Run returns
// nil. The duplicate-window guard stops the relay (with its error) when it
// finds an unsafe stream in refuse mode.
func (r *Relay) Run(ctx context.Context) error {
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHTTP()
	httpErr := make(chan error, 1)
	go func() { httpErr <- r.Health.Serve(httpCtx) }()
	go func() {
		<-ctx.Done()
		r.Health.SetDraining()
	}()

	streams := make([]string, 0, len(r.Streams))
	for _, s := range r.Streams {
		streams = append(streams, s.Name)
	}
	topic := r.Config.Watermill.ForwarderTopic
	r.Logger.Info("relay running",
		slog.String("source", config.SourceWatermillForwarder), slog.String("database", r.DB.Redacted),
		slog.String("table", MessagesTable(topic)), slog.String("offsets_table", OffsetsTable(topic)),
		slog.String("consumer_group", ConsumerGroup), slog.Any("streams", streams), slog.String("http", r.Health.Addr()))

	relayCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	guardErr := make(chan error, 1)
	go func() {
		err := r.Guard.Run(relayCtx, dedup.GuardIntervalDefault)
		if err != nil {
			r.Logger.Error("dedup guard: stopping the relay", slog.Any("error", err))
			stopRelay()
		}
		guardErr <- err
	}()

	err := r.Forwarder.Run(relayCtx)
	stopRelay()
	err = errors.Join(<-guardErr, err)
	stopHTTP()
	if herr := <-httpErr; herr != nil && !errors.Is(herr, context.Canceled) {
		err = errors.Join(err, herr)
	}
	if err == nil {
		r.Logger.Info("relay stopped")
	}
	return err
}
