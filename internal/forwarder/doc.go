// Package forwarder runs the relay: a Watermill router whose one handler
// takes messages from the outbox subscriber (internal/outbox) and publishes
// them with the JetStream publisher (internal/sink).
//
// The handler publishes each message to the subject of its row and
// records the PubAck on the message; an error is classified as retryable
// or permanent and recorded too, so the subscriber can settle the row. A
// panic in the handler is recovered and treated as a retryable failure.
// The router runs each message in its own goroutine, so up to
// relay.max_in_flight publishes await their PubAck at once.
package forwarder
