package producer_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/outbox-bridge/bridge/producer"
)

// outboxSQLite is the outbox table `bridge migrate` creates in SQLite
// (migrations/sqlite/00001_create_outbox.sql for table outbox, without the
// relay's indexes). Create yours with `bridge migrate`; this copy keeps the
// example self-contained.
const outboxSQLite = `CREATE TABLE outbox (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key  TEXT    NOT NULL UNIQUE,
    subject          TEXT    NOT NULL,
    payload          BLOB    NOT NULL,
    headers          TEXT    NOT NULL DEFAULT '{}',
    ordering_key     TEXT    NULL,
    status           TEXT    NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'in_flight', 'done', 'failed', 'permanent_failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT    NULL,
    owner            TEXT    NULL,
    available_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    claimed_at       TEXT    NULL,
    first_claimed_at TEXT    NULL,
    created_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    relayed_at       TEXT    NULL,
    stream           TEXT    NULL,
    stream_seq       INTEGER NULL
)`

// openExampleDB opens a new SQLite database in dir with the outbox table
// and a business table.
func openExampleDB(dir string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	for _, stmt := range []string{outboxSQLite, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)`} {
		if _, err := db.Exec(stmt); err != nil {
			db.Close()
			return nil, err
		}
	}
	return db, nil
}

// A service writes its business row and the event about it in one
// transaction. Once it commits, the relay publishes the event to
// events.order.created with Nats-Msg-Id "order-42-created".
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "producer-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := openExampleDB(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	// One Writer per table, shared by the whole service.
	w, err := producer.New(producer.Config{Table: "outbox", Dialect: producer.SQLite})
	if err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (42, 1999)`); err != nil {
		log.Fatal(err)
	}
	res, err := w.Write(ctx, tx, producer.Event{
		Subject:        "events.order.created",
		Payload:        []byte(`{"id":42,"total":1999}`),
		Headers:        producer.Header{"Content-Type": {"application/json"}},
		OrderingKey:    "order-42",
		IdempotencyKey: "order-42-created",
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("row %d, idempotency key %s, already enqueued: %v\n", res[0].ID, res[0].IdempotencyKey, res[0].AlreadyEnqueued)

	var headers string
	if err := db.QueryRowContext(ctx, `SELECT headers FROM outbox WHERE id = ?`, res[0].ID).Scan(&headers); err != nil {
		log.Fatal(err)
	}
	fmt.Println("headers column:", headers)
	// Output:
	// row 1, idempotency key order-42-created, already enqueued: false
	// headers column: {"Content-Type":"application/json"}
}
