package producerrelay_test

import (
	"errors"
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
