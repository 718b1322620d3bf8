// Package replay sends relayed rows of the bridge table to JetStream again:
// `bridge replay`. It reads done rows in id order in bounded batches
// (outbox.Store.ReplayRead: its own sessions, no row locks, the status
// unchanged), builds each message as the relay does (source.NewDelivery:
// the row's headers, Nats-Msg-Id from outbox.MsgID, Outbox-*) plus
// Outbox-Replay-Id, and publishes through the relay's sink (sink.Batch),
// in id order on one connection.
//
// Dedup (docs/GUARANTEES.md, "Replay"):
//   - into the rows' own stream (no destination, or --refill-stream) a row
//     is sent only when the stream no longer holds its message (its
//     stream_seq is gone or holds another Nats-Msg-Id), with its original
//     Nats-Msg-Id, and the new sequence is recorded on the row: a second
//     run, a resumed run or the live relay never doubles it;
//   - into another stream or under a subject prefix the Nats-Msg-Id is
//     ReplayMsgID(original, replay id): one replay run (resumed or not) is
//     one dedup scope, a new run sends again.
package replay
