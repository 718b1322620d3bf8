// Package watermillforwarder reads the tables that watermill-sql and Watermill's
// components/forwarder write (source: watermill-forwarder), so that a
// Watermill service can use the bridge as its forwarder daemon.
//
// A service publishes through forwarder.Publisher over watermill-sql's
// publisher, inside its business transactions: each message is stored,
// wrapped in a JSON envelope naming its destination topic, in the table
// watermill_<topic> of the forwarder topic. The relay reads that table
// with watermill-sql's own subscriber (NewSubscriber: the default schema
// and offsets adapters of PostgreSQL or MySQL, consumer group
// ConsumerGroup, offsets in watermill_offsets_<topic>), unwraps each
// envelope (Subscriber, a source of the relay's one forwarder,
// internal/forwarder) and publishes the original message to JetStream
// (Forwarder: the Subscriber plugged into that forwarder): subject =
// destination topic, data = payload, headers = metadata, Nats-Msg-Id from
// the message UUID (or a metadata entry) with outbox.MsgID, plus
// Outbox-Idempotency-Key.
//
// Guarantees: at-least-once plus dedup, in table order. A message is
// acked, and the consumer group's offset moved past it, only after its
// PubAck; a retryable failure sends it again; a stop or crash at any point
// of a batch publishes again at most that batch, with the same
// Nats-Msg-Id, and never skips a message (see the comment on dialect in
// schema.go for what was read in watermill-sql and why). A message that
// can never be published (*SkipError) is logged, counted and acked: the
// tables have no dead-letter status, and it would block every message
// after it. Relay assembles the daemon; Migrate creates the offsets table.
package watermillforwarder
