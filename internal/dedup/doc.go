// Package dedup derives the JetStream Nats-Msg-Id of an outbox row.
//
// JetStream drops a message whose Nats-Msg-Id it already stored within the
// stream's duplicate window (stream config "duplicate_window", 2 minutes by
// default), answering with a PubAck whose Duplicate field is true. The relay
// republishes a row whenever the outcome of an earlier publish is unknown (a
// crash between PubAck and mark, a timeout, a disconnect), so the id must be
// the same on every attempt, from every replica and every version of the
// bridge: MsgID is a pure function of the namespace and the row's
// idempotency key.
package dedup
