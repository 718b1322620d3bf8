package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/outbox-bridge/bridge/producer"
)

// A retried operation writes its event again with the same idempotency
// key: the second Write reports AlreadyEnqueued instead of adding a row,
// so the event is published once.
func ExampleWriter_Write_alreadyEnqueued() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "producer-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := openExampleDB(dir) // an SQLite database with the outbox table
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	w, err := producer.New(producer.Config{Dialect: producer.SQLite})
	if err != nil {
		log.Fatal(err)
	}

	for attempt := 1; attempt <= 2; attempt++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		res, err := w.Write(ctx, tx, producer.Event{
			Subject:        "events.payment.captured",
			Payload:        []byte(`{"payment":7}`),
			IdempotencyKey: "payment-7-captured",
		})
		if err != nil {
			_ = tx.Rollback()
			log.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			log.Fatal(err)
		}
		if res[0].AlreadyEnqueued {
			fmt.Printf("attempt %d: %s already enqueued\n", attempt, res[0].IdempotencyKey)
		} else {
			fmt.Printf("attempt %d: %s written as row %d\n", attempt, res[0].IdempotencyKey, res[0].ID)
		}
	}
	// Output:
	// attempt 1: payment-7-captured written as row 1
	// attempt 2: payment-7-captured already enqueued
}

// New refuses a configuration it cannot write SQL for, naming the field.
func ExampleNew() {
	_, err := producer.New(producer.Config{Table: "orders-outbox"})
	fmt.Println(err)

	w, err := producer.New(producer.Config{}) // the defaults
	fmt.Println(w.Table(), w.Dialect(), err)
	// Output:
	// invalid config: Table: "orders-outbox" is not an SQL identifier (a letter or _, then letters, digits or _)
	// outbox postgres <nil>
}

// Write refuses an invalid event before writing anything; the error names
// the event, the field and the value.
func ExampleInvalidEventError() {
	w, err := producer.New(producer.Config{Dialect: producer.SQLite})
	if err != nil {
		log.Fatal(err)
	}
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
	tx, err := db.Begin()
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()

	_, err = w.Write(context.Background(), tx,
		producer.Event{Subject: "events.order.created"},
		producer.Event{Subject: "events.order.*"},
	)
	var invalid *producer.InvalidEventError
	if errors.As(err, &invalid) {
		fmt.Println(invalid.Index, invalid.Field)
	}
	fmt.Println(err)
	// Output:
	// 1 Subject
	// outbox event 1: Subject: "events.order.*" contains the wildcard "*"; an event names one concrete subject
}
