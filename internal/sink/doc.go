// Package sink is a Watermill message.Publisher over NATS JetStream.
//
// Publisher sends each message with PublishMsgAsync, so many publishes
// await their PubAck at once on one connection, and returns only when the
// PubAck arrived or the publish failed. A PubAck with Duplicate set (the
// stream already stored this Nats-Msg-Id within its duplicate window) is a
// success. How a Watermill message becomes a NATS message is the
// Marshaler's business.
//
// Batch is the relay's path: NATS messages handed to the client one after
// another from one goroutine (Send, in turn order when a Turn is in the
// context) and their PubAcks awaited together (Wait), each one's outcome
// reported as soon as it is known, at most PublishTimeout after its send.
// It costs a goroutine, a timer and a wake-up per batch, not per message.
package sink
