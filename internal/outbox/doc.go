// Package outbox reads a transactional outbox table and turns its rows into
// Watermill messages.
//
// A producer writes its business rows and one outbox row per event in the
// same local transaction. The relay claims committed rows with a lease
// (status in_flight, owner, claimed_at from the database clock), emits each
// as a *message.Message through Subscriber, with a source.Delivery naming
// its subject, and settles the row from the outcome the forwarder reports
// on it once the message is acked (done, with the stream and sequence of
// the PubAck) or nacked (failed with backoff, or permanent_failed: a dead
// letter).
//
// Main types:
//   - DB: an open outbox database (PostgreSQL, MySQL/MariaDB or SQLite) and
//     its driver (driver.go): one executor method per operation, the SQL in
//     queries/<dialect>/*.sql, error classes and Capabilities; a reader
//     finds a database's code in driver_<dialect>.go. Every driver passes
//     the conformance suite in driver_suite_test.go.
//   - Store: the table's operations: Claim (ClaimBatch), MarkDone,
//     MarkFailed, RequeueInflightOlderThan, Stats, Enqueue.
//   - Subscriber: a Watermill message.Subscriber over a Store. Its jobs
//     are services under one start/stop lifecycle (service.go): the
//     claimer runs the claim loop (claimer.go), the completer writes
//     settlements in batches (settle.go), the rescuer requeues expired
//     leases on its own interval (rescuer.go), retention deletes old done
//     rows (retention.go).
//
// Guarantees:
//   - A claim is one short transaction (FOR UPDATE SKIP LOCKED on
//     PostgreSQL and MySQL/MariaDB), so several relays can share one table;
//     no transaction is held while a message is published. On MySQL the
//     ordering condition is evaluated by a non-locking read and only the
//     chosen rows are locked (see mysqlExecutor.Claim).
//   - Every mark is fenced by status, owner and attempt number: a relay whose
//     lease was taken over cannot overwrite the new owner's result.
//   - A row with an ordering key is not claimed while an earlier row (smaller
//     id) of the same key is pending, in_flight or failed, so per key at most
//     one row is in flight and rows are published in id order.
//   - What the relay holds is bounded in bytes as well as in rows: a claim
//     takes rows while their payloads and headers fit the room left under
//     SubscriberConfig.MaxInFlightBytes (at least one row while the bound
//     is not reached, so one row may pass it), and never reads a payload longer than the NATS
//     server's max_payload allows: the row comes with its length, computed
//     by the database, and becomes a dead letter.
//   - Times (leases, backoff) come from the database clock (UTC: now() on
//     PostgreSQL, UTC_TIMESTAMP(6) on MySQL, strftime on SQLite).
//
// MySQL/MariaDB specifics: idempotency and ordering keys are at most 255
// bytes and compare byte for byte (VARBINARY); the relay's sessions run at
// READ COMMITTED in strict SQL mode with time_zone '+00:00' (see openMySQL).
//
// Sessions (OpenSession): named after the relay owner, bounded in age and
// idle time, closed at once when they answer that they cannot serve the
// relay (read-only, shutting down), so that after a failover the pool
// reconnects to the new primary. PostgreSQL statements are named prepared
// statements on a session connected to the server directly and use none
// behind a connection pooler (pgStatements), so the relay works behind a
// pooler in transaction or statement mode, and run at READ COMMITTED
// whatever the database's default isolation (postgresExecutor.write).
// DB.CheckWritable tells readiness whether the database accepts writes.
package outbox
