package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// baseline relays the outbox the way a Watermill user does it today:
// messages written through Watermill's forwarder.Publisher over
// watermill-sql (envelopes in a PostgreSQL table), read back by
// watermill-sql's subscriber, unwrapped by Watermill's forwarder and
// published with a synchronous JetStream publish, one at a time. It returns
// rows per second.
func (e *env) baseline(ctx context.Context) (float64, error) {
	name, prefix, err := e.stream(ctx, "base")
	if err != nil {
		return 0, err
	}
	defer e.deleteStream(name)
	logger := watermill.NopLogger{}
	topic := "bench_" + e.suffix + "_forwarder"
	defer func() {
		for _, t := range []string{`"watermill_` + topic + `"`, `"watermill_offsets_` + topic + `"`} {
			_, _ = e.db.SQL.Exec("DROP TABLE IF EXISTS " + t)
		}
	}()

	sqlPub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(e.db.SQL), wsql.PublisherConfig{
		SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true,
	}, logger)
	if err != nil {
		return 0, err
	}
	pub := forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: topic})
	progress("baseline: writing %d envelopes with watermill-sql", e.s.BaselineRows)
	const chunk = 500
	for i := 0; i < e.s.BaselineRows; i += chunk {
		msgs := make([]*message.Message, 0, chunk)
		for j := i; j < min(i+chunk, e.s.BaselineRows); j++ {
			msgs = append(msgs, message.NewMessage("b-"+strconv.Itoa(j), e.payload))
		}
		if err := pub.Publish(prefix+".x", msgs...); err != nil {
			return 0, err
		}
	}

	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(e.db.SQL), wsql.SubscriberConfig{
		SchemaAdapter:  wsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{},
		PollInterval:   10 * time.Millisecond,
		// Creates the consumer-group offsets table, as a Watermill user would.
		InitializeSchema: true,
	}, logger)
	if err != nil {
		return 0, err
	}
	fwd, err := forwarder.NewForwarder(sub, syncPublisher{js: e.js}, logger, forwarder.Config{ForwarderTopic: topic})
	if err != nil {
		return 0, err
	}
	progress("baseline: relaying")
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- fwd.Run(runCtx) }()
	last := time.Now()
	var seen uint64
	moved, warned := time.Now(), false
	for {
		info, err := e.js.Stream(ctx, name)
		if err != nil {
			return 0, err
		}
		n := info.CachedInfo().State.Msgs
		if n >= uint64(e.s.BaselineRows) {
			break
		}
		if n != seen {
			seen, moved = n, time.Now()
		}
		if time.Since(last) > 2*time.Second {
			progress("baseline: %d of %d rows relayed", n, e.s.BaselineRows)
			last = time.Now()
		}
		if !warned && time.Since(moved) > 5*time.Second {
			warned = true
			e.warnOpenTransactions(ctx)
		}
		select {
		case err := <-done:
			return 0, fmt.Errorf("forwarder stopped: %v", err)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	_ = fwd.Close()
	rate := float64(e.s.BaselineRows) / elapsed.Seconds()
	progress("baseline: %.0f rows/s", rate)
	return rate, nil
}

// syncPublisher publishes each message with a synchronous JetStream
// publish, as a plain Watermill JetStream publisher does.
type syncPublisher struct{ js jetstream.JetStream }

func (p syncPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		m := nats.NewMsg(topic)
		m.Data = msg.Payload
		m.Header.Set(jetstream.MsgIDHeader, msg.UUID)
		if _, err := p.js.PublishMsg(msg.Context(), m); err != nil {
			return err
		}
	}
	return nil
}

func (syncPublisher) Close() error { return nil }

// warnOpenTransactions explains a stalled baseline: watermill-sql's
// PostgreSQL subscriber reads only rows of transactions older than every
// transaction open on the server, so another client's long-open
// transaction holds it back (and makes its rate meaningless).
func (e *env) warnOpenTransactions(ctx context.Context) {
	var open int
	var oldest float64
	err := e.db.SQL.QueryRowContext(ctx, `SELECT count(*), coalesce(max(extract(epoch FROM now() - xact_start)), 0)
FROM pg_stat_activity WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid() AND now() - xact_start > interval '1 second'`).Scan(&open, &oldest)
	if err != nil {
		progress("baseline: WARNING: no progress for 5 s (%v)", err)
		return
	}
	progress("baseline: WARNING: no progress for 5 s; %d transactions on the server are open for more than 1 s (the oldest %.0f s). "+
		"watermill-sql waits for them, so this baseline is held back by other clients: rerun on a quiet server", open, oldest)
}
