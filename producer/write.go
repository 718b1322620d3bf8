package producer

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Write inserts one outbox row per event in tx, a database/sql transaction
// the caller began and will commit or roll back with its business rows:
// rolled back, nothing is relayed; committed, every row is relayed.
//
// Every event is validated before any row is written; an invalid one fails
// the call with an *InvalidEventError (errors.Is(err, ErrInvalidEvent))
// naming the event, the field and the value, and nothing is written. An
// event without an IdempotencyKey gets a new UUIDv7.
//
// It returns one Result per event, in order. An event whose key is already
// in the table is not written and is reported with AlreadyEnqueued, not as
// an error. A database error is returned wrapped, naming the event and its
// key; the rows written before it stay in tx (PostgreSQL aborts the whole
// transaction on an error), so roll tx back.
//
// tx may be of any driver for the Writer's dialect (pgx's stdlib or lib/pq
// for Postgres, go-sql-driver/mysql for MySQL, modernc.org/sqlite or
// mattn/go-sqlite3 for SQLite).
func (w *Writer) Write(ctx context.Context, tx *sql.Tx, events ...Event) ([]Result, error) {
	if tx == nil {
		return nil, fmt.Errorf("write outbox events: tx is nil")
	}
	return w.write(ctx, sqlTx{tx}, events)
}

// WritePgx is Write for a pgx transaction (pgx.Conn.Begin,
// pgxpool.Pool.Begin, …). The Writer's dialect must be Postgres.
func (w *Writer) WritePgx(ctx context.Context, tx pgx.Tx, events ...Event) ([]Result, error) {
	if w.dialect != Postgres {
		return nil, fmt.Errorf("write outbox events: WritePgx needs a Writer of dialect %q, this one is %q", Postgres, w.dialect)
	}
	if tx == nil {
		return nil, fmt.Errorf("write outbox events: tx is nil")
	}
	return w.write(ctx, pgxTx{tx}, events)
}

func (w *Writer) write(ctx context.Context, tx runner, events []Event) ([]Result, error) {
	lim := w.impl.limits()
	lim.maxPayload = w.maxPayload
	for i := range events {
		if field, reason := check(&events[i], lim); reason != "" {
			return nil, &InvalidEventError{Index: i, Field: field, Reason: reason}
		}
	}
	results := make([]Result, 0, len(events))
	for i, e := range events {
		key := e.IdempotencyKey
		if key == "" {
			u, err := uuid.NewV7()
			if err != nil {
				return results, fmt.Errorf("outbox event %d: generate idempotency key: %w", i, err)
			}
			key = u.String()
		}
		headers, err := headersJSON(e.Headers)
		if err != nil {
			return results, fmt.Errorf("outbox event %d: encode headers: %w", i, err)
		}
		payload := e.Payload
		if payload == nil {
			payload = []byte{}
		}
		var ordering any
		if e.OrderingKey != "" {
			ordering = e.OrderingKey
		}
		id, inserted, err := w.impl.insert(ctx, tx, w.insert, key, e.Subject, payload, headers, ordering)
		if err != nil {
			return results, fmt.Errorf("write outbox event %d (idempotency key %q) to %s: %w", i, key, w.table, err)
		}
		results = append(results, Result{ID: id, IdempotencyKey: key, AlreadyEnqueued: !inserted})
	}
	return results, nil
}
