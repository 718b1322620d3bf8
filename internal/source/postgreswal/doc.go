// Package postgreswal is the postgres-wal source: the bridge table's inserts
// read from PostgreSQL's write-ahead log through a logical replication slot
// (the built-in pgoutput plugin, decoded with jackc/pglogrepl), published
// in commit order through the same forwarder as the table source.
//
// Main types:
//   - Subscriber: a Watermill message.Subscriber over the slot. It emits
//     each inserted row (built by source.NewDelivery: the same Nats-Msg-Id,
//     headers and validation as source: table; with a source.Delivery) in
//     commit order to the forwarder of source: table, marks rows relayed in
//     batches after the outcome it reports (source.OutcomeOf) is a PubAck,
//     confirms the slot's position past them, and sweeps pending rows the
//     slot will not deliver.
//   - Relay: the daemon of `bridge run` with source: postgres-wal.
//   - Setup, Check, SlotStatus, DropSlot, CheckWALLevel: the publication
//     and the slot (bridge migrate, bridge status, bridge slot drop).
//   - SlotCollector: the slot's retained and unconfirmed WAL as metrics.
//
// Guarantees (docs/GUARANTEES.md, "The postgres-wal source"):
//   - Rows reach the NATS client in commit order (sink.Turn) over one
//     connection without a reconnect buffer, so the stream stores them in
//     commit order, unless NATS refuses one row and stores a later one.
//   - The slot's confirmed position passes a row only after its PubAck and
//     its mark: after a crash everything after it is published again and
//     deduplicated by Nats-Msg-Id.
//   - A retryable failure holds the rows after it; rows that can never be
//     published, or fail relay.max_attempts times, become dead letters.
//   - What it read and has not settled stays within MaxInFlight rows and
//     MaxInFlightBytes bytes of payloads and headers, but for one row
//     (budget.go); a payload over the NATS server's max_payload is never
//     kept.
//
// How it works, and what the source seam should make of its joints:
// docs/POSTGRES-WAL.md.
package postgreswal
