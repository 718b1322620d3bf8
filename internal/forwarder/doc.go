// Package forwarder runs the relay: a Watermill router whose one handler
// takes the messages of a source (package source: the outbox subscriber of
// internal/outbox, postgreswal's, watermillforwarder's) and publishes them with the
// JetStream publisher (internal/sink). It is the one forwarder of every
// source.
//
// A message carries a source.Batch: one delivery per row, a claimed batch
// of rows for the table source. The handler hands each delivery's NATS
// message to the client in order, awaits their PubAcks together
// (sink.Batch) and reports each one's outcome on its delivery as soon as
// it is known, as a typed source.Outcome: the PubAck, or the error
// classified (Classify: retryable, permanent, unavailable, or held by the
// duplicate-window guard), so the source can settle each row. The message
// is acked when every row was published, nacked otherwise. A panic in the
// handler is recovered and reported as a retryable failure of every row
// not reported yet. The router runs each message in its own goroutine:
// up to relay.max_in_flight rows await their PubAck at once, at the cost
// of a goroutine per message, not per row.
package forwarder
