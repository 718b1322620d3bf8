// Package source is the seam between a source of the relay and the one
// forwarder (internal/forwarder) that publishes what sources read.
//
// A source is a Watermill message.Subscriber: the bridge table's claims
// (internal/outbox, source: table), the inserts read from the write-ahead
// log (internal/source/postgreswal, source: postgres-wal), the envelopes of a
// Watermill forwarder topic (internal/source/watermillforwarder, source:
// watermill-forwarder). Each message it emits carries in its context a
// Batch of Deliveries — one per row; a claimed batch of rows for the
// table source, one row for the others (With, NewMessage). A Delivery
// names the subject, the last moment its message may be handed to the
// NATS client (Deadline) and, when the source built it, the NATS message
// itself (Msg); otherwise the sink's Marshaler builds it from the
// Watermill message.
//
// The forwarder publishes every delivery, Reports a typed Outcome on each
// as soon as it is known — published, with the stream and sequence of the
// PubAck, or failed, with a FailureClass and the error — and then acks the
// message when every delivery was published, and nacks it otherwise. A
// source settles each row from its outcome, by its own means: the table
// source marks the row under its lease as each outcome is reported (the
// Batch's reported hook), the postgres-wal source marks it and advances
// its slot's confirmed position, the watermill-forwarder source acks or
// nacks watermill-sql's message so that its consumer group's offset moves
// (OutcomeOf, once the message is acked or nacked). A source takes over
// the deliveries whose outcome does not come in time (Delivery.Take). No
// source reads another's package to learn what became of a row.
package source
