package producerrelay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/producer"
)

// The producer refuses the keys the relay's enqueue refuses: a key of
// outbox.KeyMaxBytes is written, one byte more is refused before the
// database sees it.
func TestKeyLimitMatchesRelay(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	longest := strings.Repeat("k", outbox.KeyMaxBytes)
	b.write(t, producer.Event{Subject: "events.a", IdempotencyKey: longest})

	_, err := b.try(t, producer.Event{Subject: "events.a", IdempotencyKey: longest + "k"})
	var invalid *producer.InvalidEventError
	require.True(t, errors.As(err, &invalid), "a key of %d bytes: %v", outbox.KeyMaxBytes+1, err)
	require.Equal(t, 1, b.count(t))
}

// The producer refuses the subjects the relay refuses for their length: a
// subject of outbox.SubjectMaxBytes is written, one byte more is refused.
func TestSubjectLimitMatchesRelay(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	longest := "events." + strings.Repeat("s", outbox.SubjectMaxBytes-len("events."))
	b.write(t, producer.Event{Subject: longest, IdempotencyKey: "longest"})

	_, err := b.try(t, producer.Event{Subject: longest + "s", IdempotencyKey: "too-long"})
	var invalid *producer.InvalidEventError
	require.True(t, errors.As(err, &invalid), "a subject of %d bytes: %v", outbox.SubjectMaxBytes+1, err)
	require.Equal(t, 1, b.count(t))
}

// The producer's least message headers are the relay's
// (outbox.MinMessageHeaderBytes): with Config.MaxPayload, a payload that
// fits them exactly is written and one byte more is refused, whatever the
// key (plain, hashed into the Nats-Msg-Id, spaced, generated) and headers.
func TestMaxPayloadMatchesRelay(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	const maxPayload = 8192
	w, err := producer.New(producer.Config{Table: b.w.Table(), Dialect: producer.SQLite, MaxPayload: maxPayload})
	require.NoError(t, err)
	for i, e := range []producer.Event{
		{IdempotencyKey: "order-42-created"},
		{IdempotencyKey: "  spaced  "},
		{IdempotencyKey: "sha256:looks-hashed"},
		{IdempotencyKey: "clé-non-ascii"},
		{IdempotencyKey: strings.Repeat("k", 200)},
		{IdempotencyKey: "with-headers", Headers: producer.Header{"Content-Type": {"application/json"}, "X-Many": {"a", " b ", ""}}},
	} {
		e.Subject = "events.a"
		e.IdempotencyKey = fmt.Sprint(i, e.IdempotencyKey)
		fits := maxPayload - int(outbox.MinMessageHeaderBytes(e.IdempotencyKey, e.Headers))
		e.Payload = make([]byte, fits+1)
		ctx := context.Background()
		tx, err := b.prod.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = w.Write(ctx, tx, e)
		var invalid *producer.InvalidEventError
		require.True(t, errors.As(err, &invalid) && invalid.Field == "Payload", "key %q, %d bytes: %v", e.IdempotencyKey, fits+1, err)
		e.Payload = e.Payload[:fits]
		_, err = w.Write(ctx, tx, e)
		require.NoError(t, err, "key %q, %d bytes", e.IdempotencyKey, fits)
		require.NoError(t, tx.Rollback())
	}
}
