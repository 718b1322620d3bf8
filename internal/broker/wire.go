package broker

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/google/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/config"
)

// ProviderSet builds the NATS side of the relay: the connection (starting
// the embedded server when configured), JetStream and the ensured streams.
var ProviderSet = wire.NewSet(ProvideConn, ProvideJetStream, ProvideStreams, NewDenials, ProvideKeeper, ProvidePinger)

// Streams are the streams ensured at start.
type Streams []StreamSpec

// Names returns the streams' names, in order.
func (s Streams) Names() []string {
	names := make([]string, len(s))
	for i, spec := range s {
		names[i] = spec.Name
	}
	return names
}

// ProvideConn connects to nats.url; with "embedded" it first starts the
// in-process server on nats.listen storing in <data_dir>/jetstream. The
// server's publish permission violations go to denials. The cleanup
// closes the connection and stops the server.
func ProvideConn(ctx context.Context, cfg *config.Config, logger *slog.Logger, denials *Denials) (*nats.Conn, func(), error) {
	cc := connectConfig(cfg)
	cc.Denials = denials
	if !cfg.EmbeddedNATS() {
		nc, err := Connect(ctx, cc, logger)
		if err != nil {
			return nil, nil, err
		}
		logger.Info("connected to NATS", slog.String("server", redactNATSURL(nc.ConnectedUrl())))
		return nc, nc.Close, nil
	}
	storeDir, err := filepath.Abs(cfg.JetStreamDir())
	if err != nil {
		return nil, nil, fmt.Errorf("data_dir %s: %w", cfg.DataDir, err)
	}
	srv, err := StartEmbedded(cfg.NATS.Listen, storeDir, logger)
	if err != nil {
		return nil, nil, err
	}
	cc.URL = srv.ClientURL()
	nc, err := Connect(ctx, cc, logger)
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	return nc, func() { nc.Close(); srv.Shutdown() }, nil
}

// ProvideClientConn connects a command-line client (bridge tail) to what
// `bridge run` uses: nats.url, or with "embedded" the embedded server at
// nats.listen, which must be running.
func ProvideClientConn(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*nats.Conn, func(), error) {
	cc := connectConfig(cfg)
	if cfg.EmbeddedNATS() {
		cc.URL = "nats://" + cfg.NATS.Listen
	}
	nc, err := Connect(ctx, cc, logger)
	if err != nil {
		if cfg.EmbeddedNATS() {
			return nil, nil, fmt.Errorf("%w (is `bridge run` running with the embedded server on %s?)", err, cfg.NATS.Listen)
		}
		return nil, nil, err
	}
	return nc, nc.Close, nil
}

func connectConfig(cfg *config.Config) ConnectConfig {
	n := cfg.NATS
	return ConnectConfig{
		URL: n.URL, Name: "outbox-bridge " + cfg.Relay.Owner,
		CredsFile: n.CredsFile, NkeySeedFile: n.NkeySeedFile,
		User: n.User, Password: n.Password, Token: n.Token,
		CAFile: n.TLS.CAFile, CertFile: n.TLS.CertFile, KeyFile: n.TLS.KeyFile,
		// postgres-wal publishes in commit order (see ConnectConfig).
		NoReconnectBuffer: cfg.Source == config.SourcePostgresWAL,
	}
}

// ProvideJetStream returns a JetStream context for asynchronous publishing:
// every PubAck future fails after relay.publish_timeout (so none waits
// forever, nats.go#1819), and up to relay.max_in_flight plus a margin may
// be pending before the client stalls.
func ProvideJetStream(nc *nats.Conn, cfg *config.Config) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncTimeout(cfg.Relay.PublishTimeout),
		jetstream.WithPublishAsyncMaxPending(cfg.Relay.MaxInFlight+256),
	)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, nil
}

// ProvideStreams creates the configured streams that are missing.
func ProvideStreams(ctx context.Context, js jetstream.JetStream, cfg *config.Config, logger *slog.Logger) (Streams, error) {
	var specs Streams
	for _, s := range cfg.EffectiveStreams() {
		specs = append(specs, StreamSpec{Name: s.Name, Subjects: s.Subjects, Duplicates: s.Duplicates,
			Replicas: s.Replicas, Storage: s.Storage, MaxAge: s.MaxAge})
	}
	if err := EnsureStreams(ctx, js, specs, logger); err != nil {
		return nil, err
	}
	return specs, nil
}

// ProvideKeeper keeps the ensured streams: created again when lost.
func ProvideKeeper(js jetstream.JetStream, streams Streams, logger *slog.Logger) *Keeper {
	return NewKeeper(js, streams, logger)
}

// ProvidePinger watches that the NATS server answers on nc.
func ProvidePinger(nc *nats.Conn, logger *slog.Logger) *Pinger {
	return NewPinger(nc, logger.With(slog.String("component", "nats")))
}
