// Package dedup keeps the promise of JetStream's duplicate window beyond
// it.
//
// JetStream drops a message whose Nats-Msg-Id it already stored within the
// stream's duplicate window (stream config "duplicate_window", 2 minutes by
// default), answering with a PubAck whose Duplicate field is true; the id
// is outbox.MsgID, a pure function of the namespace and the row's
// idempotency key. A row published again after the window would be stored
// twice: the Guard checks that every stream's window covers how long a row
// can wait for its publish to be settled, and holds back the rows of a
// stream that does not; the Reconciler looks up, in the stream, the rows
// claimed again long after their first publish, so that those found are
// settled as relayed without publishing.
package dedup
