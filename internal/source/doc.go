// Package source is the seam between a source of the relay and the one
// forwarder (internal/forwarder) that publishes what sources read.
//
// A source is a Watermill message.Subscriber: the bridge table's claims
// (internal/outbox, source: table), the inserts read from the write-ahead
// log (internal/walsource, source: postgres-wal), the envelopes of a
// Watermill forwarder topic (internal/wmsource, source:
// watermill-forwarder). Each message it emits carries a Delivery in its
// context (With): the subject to publish to and the last moment the
// message may be handed to the NATS client. The forwarder publishes the
// message, Reports a typed Outcome on its Delivery — published, with the
// stream and sequence of the PubAck, or failed, with a FailureClass and
// the error — and then acks it (published) or nacks it (failed).
//
// The source reads the outcome once the message is acked or nacked
// (OutcomeOf) and settles the row by its own means: the table source marks
// the row under its lease, the postgres-wal source marks it and advances
// its slot's confirmed position, the watermill-forwarder source acks or
// nacks watermill-sql's message so that its consumer group's offset moves.
// No source reads another's package to learn what became of a message.
package source
