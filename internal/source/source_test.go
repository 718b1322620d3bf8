package source_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/source"
)

func emitted(d *source.Delivery) *message.Message {
	msg := message.NewMessage("id", nil)
	msg.SetContext(source.With(context.Background(), d))
	return msg
}

// TestOutcomeOf: the first report counts; without one, an ack is a
// publish whose stream is unknown and a nack a retryable failure that
// says there was no reason.
func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	d := &source.Delivery{Subject: "events.a"}
	msg := emitted(d)
	require.Same(t, d, source.Of(msg))
	cause := errors.New("stream offline")
	d.Report(source.Failed(cause, source.Retryable))
	d.Report(source.Published("S", 7, false))
	msg.Nack()
	out := source.OutcomeOf(msg)
	require.Equal(t, source.Failed(cause, source.Retryable), out)
	require.Equal(t, "stream offline", out.Reason())

	acked := emitted(&source.Delivery{})
	acked.Ack()
	require.Equal(t, source.Outcome{Published: true}, source.OutcomeOf(acked))
	require.Empty(t, source.OutcomeOf(acked).Reason())

	nacked := message.NewMessage("bare", nil) // no delivery at all
	nacked.Nack()
	out = source.OutcomeOf(nacked)
	require.Equal(t, source.Retryable, out.Class)
	require.Equal(t, "handler nacked the message without a reason", out.Reason())

	var none *source.Delivery
	none.Report(source.Published("S", 1, false)) // a message no source emitted: nothing to record
}

// TestCheckDeadline: a message past its delivery's deadline is refused
// with ErrPublishDeadline; before it, or without a deadline or a
// delivery, it passes.
func TestCheckDeadline(t *testing.T) {
	t.Parallel()
	require.NoError(t, source.CheckDeadline(emitted(&source.Delivery{Deadline: time.Now().Add(time.Minute)})))
	require.NoError(t, source.CheckDeadline(emitted(&source.Delivery{})))
	require.NoError(t, source.CheckDeadline(message.NewMessage("bare", nil)))
	err := source.CheckDeadline(emitted(&source.Delivery{Deadline: time.Now().Add(-time.Second)}))
	require.ErrorIs(t, err, source.ErrPublishDeadline)
	require.Contains(t, err.Error(), "late")
}
