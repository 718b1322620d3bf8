// Package producer writes outbox rows for the bridge relay from a Go
// service, inside the service's own business transaction.
//
// A service that publishes domain events inserts one row per event into
// the outbox table in the same local transaction as its business rows; the
// bridge relay reads committed rows and publishes them to NATS JetStream.
// This package is that INSERT, done right: it validates events the way the
// relay will, encodes headers, picks the SQL of the database, and tells
// which events were already enqueued. The table contract and the same
// INSERT for other languages are in docs/PRODUCERS.md.
//
// # Use
//
// Build one Writer per table with New (Config: Table, Dialect) and share
// it. In each transaction call Writer.Write (a database/sql *sql.Tx, any
// driver) or Writer.WritePgx (a pgx.Tx) with the Events, then commit as
// usual:
//
//	w, err := producer.New(producer.Config{Table: "outbox", Dialect: producer.Postgres})
//	…
//	tx, err := db.BeginTx(ctx, nil)
//	… // business rows
//	res, err := w.Write(ctx, tx, producer.Event{
//		Subject:        "events.order.created",
//		Payload:        body,
//		Headers:        producer.InjectTraceContext(ctx, producer.Header{"Content-Type": {"application/json"}}),
//		OrderingKey:    "order-42",
//		IdempotencyKey: "order-42-created",
//	})
//	…
//	err = tx.Commit()
//
// Each Result gives the row id, the idempotency key used, and whether a row
// with that key was already there (AlreadyEnqueued: not an error, nothing
// was written for that event). Invalid events are refused before anything is
// written, with an *InvalidEventError naming the event, the field and the
// value.
//
// # Guarantees
//
//   - Atomic with the business change: rows are written in the caller's
//     transaction. Rolled back, nothing is relayed; committed, every row is
//     relayed at least once, or kept in the table as a dead letter
//     (permanent_failed, with last_error) when JetStream refuses it for good
//     (e.g. a payload over the stream's maximum message size) or its attempts
//     run out (relay.max_attempts, e.g. no stream takes its subject). The
//     relay only sees committed rows.
//   - At least once, deduplicated: a committed row is published until
//     JetStream acknowledges it, so a message can be published more than
//     once (a relay crash between the acknowledgement and its mark). Every
//     publish of a row carries the same Nats-Msg-Id, and JetStream drops
//     repeats within the stream's duplicate window (2 minutes by default);
//     a row whose first publish is older than the window is looked up in
//     the stream before it is published again (docs/GUARANTEES.md). The
//     Nats-Msg-Id is the idempotency key itself when the key is 1–128
//     bytes of visible ASCII (0x21–0x7E) not starting with "sha256:",
//     otherwise "sha256:" + the lowercase hex SHA-256 of the key; prefixed
//     "namespace/" when the relay sets dedup.namespace. The relay also sets
//     Outbox-Id, Outbox-Idempotency-Key, Outbox-Created-At and
//     Outbox-Attempt; events may set none of these.
//   - One row per idempotency key: a second event with a key still in the
//     table is not written (Result.AlreadyEnqueued). Relayed rows are
//     deleted after the relay's retention, after which the key can be
//     written again; past JetStream's duplicate window it would then be
//     published again.
//   - Per ordering key, id order: rows with the same OrderingKey are
//     published one at a time in row id order. Ids are given at insert
//     time, but the relay sees rows at commit time, so write one key's rows
//     one transaction after another (an aggregate's row lock already makes
//     you do so); rows written in one call are in event order. A row that
//     becomes a dead letter does not hold back the later rows of its key.
//     Rows without an ordering key are not ordered.
//   - Headers, including the W3C traceparent and tracestate written by
//     InjectTraceContext, reach the NATS message unchanged; the payload is
//     relayed byte for byte.
//
// The package holds no connection and starts no goroutine; a Writer is safe
// for concurrent use.
package producer
