// Command service is the smallest Go service that uses the bridge's client
// modules, and the check that they work on the oldest Go the project
// supports (go.mod says go 1.25; CI runs it with GOTOOLCHAIN=go1.25.9).
//
// It writes one order and its event in one PostgreSQL transaction with the
// producer module, then reads the event from JetStream once the relay
// (`bridge run`, started separately on the same table) has published it,
// through a handler wrapped by the consumer module's Dedup:
//
//	bridge migrate --database-url "$DB" --table example_outbox
//	bridge run --database-url "$DB" --table example_outbox &
//	go run . --database-url "$DB" --nats-url nats://127.0.0.1:4222
//
// It exits 0 after the handler saw the event, 1 when the event does not
// arrive within --timeout, 2 on bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/consumer"
	"github.com/outbox-bridge/bridge/producer"
)

func main() {
	databaseURL := flag.String("database-url", "", "PostgreSQL URL of the service's database (required)")
	natsURL := flag.String("nats-url", nats.DefaultURL, "NATS server the relay publishes to")
	table := flag.String("table", "example_outbox", "outbox table, created by bridge migrate")
	stream := flag.String("stream", "EVENTS", "stream that captures --subject")
	subject := flag.String("subject", "events.example.order_created", "subject of the event")
	timeout := flag.Duration("timeout", time.Minute, "how long to wait for the relayed event")
	flag.Parse()
	if *databaseURL == "" {
		fmt.Fprintln(os.Stderr, "service: --database-url is required")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *databaseURL, *natsURL, *table, *stream, *subject); err != nil {
		fmt.Fprintln(os.Stderr, "service: "+err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, databaseURL, natsURL, table, stream, subject string) error {
	orderID := uuid.NewString()
	key := "order-" + orderID + "-created"

	// Produce: the business row and its event in one transaction.
	db, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect to the database: %w", err)
	}
	defer db.Close(context.WithoutCancel(ctx))
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_orders (id text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create example_orders: %w", err)
	}
	w, err := producer.New(producer.Config{Table: table, Dialect: producer.Postgres})
	if err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO example_orders (id) VALUES ($1)`, orderID); err != nil {
		return fmt.Errorf("insert order: %w", err)
	}
	res, err := w.WritePgx(ctx, tx, producer.Event{
		Subject:        subject,
		Payload:        []byte(`{"order_id":"` + orderID + `"}`),
		Headers:        producer.Header{"Content-Type": {"application/json"}},
		OrderingKey:    "order-" + orderID,
		IdempotencyKey: key,
	})
	if err != nil {
		return fmt.Errorf("write the event: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	fmt.Printf("wrote order %s and outbox row %d (idempotency key %s)\n", orderID, res[0].ID, key)

	// Consume: the relayed event, through a deduplicating handler.
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return fmt.Errorf("connect to NATS %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := consumer.CreateBucket(ctx, js, "example-service-dedup", time.Hour)
	if err != nil {
		return fmt.Errorf("create the dedup bucket: %w", err)
	}
	cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("create a consumer on stream %s: %w", stream, err)
	}
	got := make(chan jetstream.Msg, 1)
	cc, err := cons.Consume(consumer.Dedup(kv, func(_ context.Context, msg jetstream.Msg) error {
		if msg.Headers().Get("Outbox-Idempotency-Key") == key {
			select {
			case got <- msg:
			default:
			}
		}
		return nil
	}))
	if err != nil {
		return err
	}
	select {
	case msg := <-got:
		// Let the handler's ack reach the server before the connection closes.
		cc.Drain()
		<-cc.Closed()
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		fmt.Printf("read it from stream %s, sequence %d, Nats-Msg-Id %s: %s\n",
			md.Stream, md.Sequence.Stream, msg.Headers().Get(jetstream.MsgIDHeader), msg.Data())
		return nil
	case <-ctx.Done():
		cc.Stop()
		return errors.New("the event did not arrive: is bridge run relaying table " + table + " to " + natsURL + "?")
	}
}
