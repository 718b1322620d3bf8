// Package forwarder runs the relay: a Watermill router whose one handler
// takes the messages of a source (package source: the outbox subscriber of
// internal/outbox, walsource's, wmsource's) and publishes them with the
// JetStream publisher (internal/sink). It is the one forwarder of every
// source.
//
// The handler publishes each message to the subject of its
// source.Delivery and reports the PubAck on it as a typed source.Outcome;
// an error is classified (Classify: retryable, permanent, unavailable, or
// held by the duplicate-window guard) and reported too, and the message is
// nacked, so the source can settle its row. A panic in the handler is
// recovered and treated as a retryable failure.
// The router runs each message in its own goroutine, so up to
// relay.max_in_flight publishes await their PubAck at once.
package forwarder
