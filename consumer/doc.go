// Package consumer helps downstream JetStream consumers process a message
// once although JetStream may deliver it more than once.
//
// JetStream's own dedup acts when a message is published: the stream drops a
// message whose Nats-Msg-Id it stored within its duplicate window (2 minutes
// by default; an id expires one window after its first store,
// nats-server#7302). A consumer can still see the same message twice:
//
//   - a redelivery of the same stream message, after an ack that was lost or
//     came after AckWait, a nak, or a crash of the consumer;
//   - a copy republished after the window, which the stream stores as a new
//     message with a new sequence. The bridge republishes a row whose first
//     publish is in doubt, with the same Nats-Msg-Id.
//
// # Protocol
//
// Dedup (or New and Deduplicator.Wrap) wraps a Handler into a
// jetstream.MessageHandler for cons.Consume, or for calling on each message
// of cons.Messages() or cons.Fetch. It keeps one entry per Nats-Msg-Id in a
// KV bucket (see CreateBucket) and, for each message:
//
//  1. reads the Nats-Msg-Id header, case-sensitively as the server does
//     (nats-server server/client.go getHeaderKeyIndex).
//     A message without one is passed to the handler with no dedup, acked on
//     success and nakked on failure; with RequireMsgID it is terminated
//     instead, as a redelivery of it could not be recognized.
//  2. claims the message BEFORE processing it: kv.Create(Key(id), value).
//     Create is a compare-and-set on the server (a publish expecting the
//     key's last sequence to be 0, or that of its delete marker), so among
//     concurrent deliveries, instances and consumers sharing the bucket
//     exactly one succeeds. Success: this delivery owns the
//     message. jetstream.ErrKeyExists: the message was processed, or is being
//     processed; the delivery is acked without running the handler (with
//     WithProcessingLease, see below). Any other error (KV unavailable, the
//     base context ended): nak, handler not run.
//  3. runs the handler. Success: double ack (msg.DoubleAck, which waits for
//     the server's confirmation). Failure, or a panic (recovered): delete the
//     entry, fenced by the claim's revision (kv.Delete with LastRevision), so
//     the redelivery runs the handler again, then nak (msg.NakWithDelay with
//     WithNakDelay).
//
// The key is Key(id), the hex SHA-256 of the id: KV keys allow only
// [-/_=.a-zA-Z0-9]. The value is JSON, for example
//
//	{"state":"processing","at":"2026-05-04T10:00:00.123Z","msg_id":"order-1","stream":"EVENTS","stream_seq":42,"consumer":"billing"}
//
// "state" is "processing" from the claim; with WithProcessingLease it becomes
// "done" once the handler succeeded, before the ack. Without a lease it stays
// "processing": that mode does not track completion, any entry means "skip".
// "at" is the writer's clock and only informational; "stream", "stream_seq"
// and "consumer" are those of the delivery that wrote the entry.
//
// # What it guarantees
//
// For messages carrying a Nats-Msg-Id, while the id's entry lives (the
// bucket's TTL, counted from the entry's last write), among all instances
// and consumers sharing the bucket:
//
//   - Handler runs for one id never overlap, and at most one of them
//     succeeds (without a lease; with one, provided every run ends within the
//     lease, see below). A failed run leaves no entry, so a later delivery runs
//     again: a handler that fails must leave no effect, or only idempotent
//     ones.
//   - A message is acked only after a successful run, or after an entry for
//     its id was found. An ack that is lost is harmless: the redelivery finds
//     the entry and is skipped.
//
// This is effectively-once processing only for handlers whose side effects
// are idempotent, or whose side effects happen before the ack with the KV
// entry as their marker. The entry is written before the side effect and the
// ack after it, and nothing makes the three atomic: this package does not
// make the handler's external effects atomic with the entry or with the ack.
// Where the two can part:
//
//   - a crash after the side effect and before the ack leaves the entry: the
//     redelivery is skipped, the side effect happened once. As intended.
//   - a crash (kill, OOM, power loss, a hung handler) after the claim and
//     before the side effect also leaves the entry: without a lease the
//     redelivery is skipped too, and the message is acked although it was
//     never processed. The same happens when the delete after a failed run
//     fails (KV unreachable), and when a redelivery arrives while the first
//     run is still going (handler slower than AckWait: keep it well under
//     AckWait, or call msg.InProgress) and that run then fails.
//
// # Processing lease
//
// WithProcessingLease(d) closes that window at the price of the opposite
// one. The entry says "processing" while the handler runs and "done" after
// it succeeded. A delivery that finds "done" is skipped; one that finds
// "processing" younger than d is nakked with a delay of the lease's remaining
// time (it may be in progress elsewhere); one that finds it older takes it
// over with kv.Update on the entry's revision (one taker wins) and runs the
// handler. The handler's context ends d after the claim. So a message whose
// run crashed before its side effect is processed after the lease: at least
// once. But a run that crashed after its side effect and before the "done"
// mark, or that ignored its context and ran past the lease, is run a second
// time: the side effect can happen twice. Choose d above the longest handler
// run. The lease's age is the consumer's clock minus the server's timestamp
// of the entry's last write, so clock skew between the two shifts the lease
// by the skew. Each nak of a held message counts as a delivery against the
// consumer's MaxDeliver.
//
// Summary: without a lease, a doubtful message is skipped (at most once;
// a message can be lost in the crash window); with a lease, it is run again
// after the lease (at least once; an effect can repeat in the crash window).
// Handlers that need exactly-once effects make them idempotent, for example
// by writing the Nats-Msg-Id with a unique constraint in the same database
// transaction as the effect.
//
// # Retention
//
// Entries expire with the bucket's TTL (jetstream.KeyValueConfig TTL, the
// max age of the bucket's stream), counted from their last write; an expired
// entry is forgotten and a later copy of the message is processed again. The
// TTL must exceed the longest time between a message's first delivery and
// its last possible redelivery or republish:
//
//   - redeliveries: up to MaxDeliver times AckWait (or the consumer's
//     BackOff) plus nak delays;
//   - republishes: how long the producer may publish the same id again. For
//     the bridge, how long a row can stay in doubt and be retried, including
//     a manual `bridge retry`;
//   - replays: a consumer created or reset to deliver from the start sees
//     every message still in the stream; only a TTL of at least the stream's
//     MaxAge skips them all;
//   - with a lease, far more than the lease, or an entry can expire while its
//     message is processed.
//
// A bucket belongs to one processing application (one durable consumer and
// its instances): two applications that must each process a message need
// separate buckets. Ids must be unique across all streams whose consumers
// share a bucket (the bridge's dedup.namespace). All instances sharing a
// bucket use the same lease setting: a leased instance would take over the
// "processing" entries an instance without a lease leaves behind.
//
// It does not deduplicate messages without a Nats-Msg-Id, and it is only as
// durable as the bucket: entries lost with the bucket's data (an R1 file
// store on a crashed host without sync_interval: always, a purged bucket) are
// forgotten.
package consumer
