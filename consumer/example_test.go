package consumer_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/consumer"
)

// A producer in doubt republishes "order-1" after the stream's duplicate
// window has passed, so the stream stores it twice. The consumer's handler,
// wrapped by Dedup, runs once; the copy is acked without running it.
func ExampleDedup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// An in-process NATS server with JetStream.
	dir, err := os.MkdirTemp("", "consumer-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}

	// A stream with the shortest duplicate window, and the dedup bucket.
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: 100 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	kv, err := consumer.CreateBucket(ctx, js, "billing-dedup", 24*time.Hour)
	if err != nil {
		log.Fatal(err)
	}

	// Publish order-1, then again until the stream stores the copy as a new
	// message: the window drops copies for only 100 ms after the first.
	msg := nats.NewMsg("events.order")
	msg.Header.Set(jetstream.MsgIDHeader, "order-1")
	msg.Data = []byte("order 1 created")
	publish := func() *jetstream.PubAck {
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			log.Fatal(err)
		}
		return ack
	}
	publish()
	for publish().Duplicate { // until the stream's duplicate window has passed
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("stream holds order-1 twice")

	// Consume with the handler wrapped by Dedup.
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		log.Fatal(err)
	}
	handled := make(chan struct{}, 2)
	handle := consumer.Dedup(kv, func(ctx context.Context, msg jetstream.Msg) error {
		fmt.Printf("handled %s: %s\n", msg.Headers().Get(jetstream.MsgIDHeader), msg.Data())
		handled <- struct{}{}
		return nil
	})
	cc, err := cons.Consume(handle)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { cc.Stop(); <-cc.Closed() }()

	// Wait until the consumer has acked both stream messages.
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if info.AckFloor.Stream == 2 && info.NumAckPending == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond) // until the server has the acks
	}
	fmt.Printf("acked 2 messages, handler ran %d time(s)\n", len(handled))

	// Output:
	// stream holds order-1 twice
	// handled order-1: order 1 created
	// acked 2 messages, handler ran 1 time(s)
}
