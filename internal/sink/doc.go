// Package sink is a Watermill message.Publisher over NATS JetStream.
//
// Publisher sends each message with PublishMsgAsync, so many publishes
// await their PubAck at once on one connection, and returns only when the
// PubAck arrived or the publish failed. A PubAck with Duplicate set (the
// stream already stored this Nats-Msg-Id within its duplicate window) is a
// success. How a Watermill message becomes a NATS message is the
// Marshaler's business.
package sink
