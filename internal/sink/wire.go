package sink

import (
	"github.com/google/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/config"
)

// ProviderSet builds the JetStream publisher.
var ProviderSet = wire.NewSet(ProvidePublisher)

// ProvidePublisher returns a Publisher waiting relay.publish_timeout for
// each PubAck; a publish that times out on a subject the server denied
// fails with the denial, one that times out while the server answers no
// PING fails with ErrUnresponsive, and one in progress when nc is closed
// for good fails at once.
func ProvidePublisher(js jetstream.JetStream, nc *nats.Conn, cfg *config.Config, m Marshaler, denials *broker.Denials, pinger *broker.Pinger) (*Publisher, error) {
	return New(js, Config{PublishTimeout: cfg.Relay.PublishTimeout, Marshaler: m, Denied: denials.Denied, Conn: nc, Answered: pinger.AnsweredSince})
}
