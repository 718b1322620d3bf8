package source_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/source"
)

// bufferedSource emits the messages already in its channel.
type bufferedSource struct{ ch chan *message.Message }

func (s bufferedSource) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	return s.ch, nil
}

func (s bufferedSource) Close() error { return nil }

// TestCoalesce: the messages of a one-row-per-message source reach the
// forwarder in batches of at most max, in order; reporting a delivery of a
// batch acks (published) or nacks (failed) the source's own message with
// the outcome readable there; a message of several deliveries travels
// alone, in its place.
func TestCoalesce(t *testing.T) {
	t.Parallel()
	src := bufferedSource{ch: make(chan *message.Message, 16)}
	var inner []*message.Message
	for i := range 7 {
		d := &source.Delivery{Subject: fmt.Sprint("events.", i)}
		m := message.NewMessage(fmt.Sprint(i), nil)
		m.SetContext(source.With(context.Background(), d))
		inner = append(inner, m)
		src.ch <- m
	}
	several := message.NewMessage("several", nil)
	several.SetContext(source.WithBatch(context.Background(), source.NewBatch([]*source.Delivery{{Subject: "a"}, {Subject: "b"}}, nil)))
	src.ch <- several
	last := message.NewMessage("last", nil)
	last.SetContext(source.With(context.Background(), &source.Delivery{Subject: "events.last"}))
	src.ch <- last
	close(src.ch)

	out, err := source.Coalesce(src, 3).Subscribe(context.Background(), "t")
	require.NoError(t, err)
	var sizes []int
	var subjects []string
	var outer []*message.Message
	for m := range out {
		b := source.BatchOf(m)
		require.NotNil(t, b)
		sizes = append(sizes, b.Len())
		for i := range b.Len() {
			subjects = append(subjects, b.At(i).Subject)
		}
		outer = append(outer, m)
	}
	require.Equal(t, []int{3, 3, 1, 2, 1}, sizes)
	require.Equal(t, []string{"events.0", "events.1", "events.2", "events.3", "events.4", "events.5", "events.6", "a", "b", "events.last"}, subjects)
	require.Same(t, several, outer[3], "a message of several deliveries travels as it is")
	require.Same(t, last, outer[4], "a batch of one is the message itself")

	first := source.BatchOf(outer[0])
	first.At(1).Report(source.Failed(errors.New("no stream"), source.Retryable))
	first.At(0).Report(source.Published("EVENTS", 9, false))
	select {
	case <-inner[0].Acked():
	default:
		require.FailNow(t, "a published delivery acks its message")
	}
	select {
	case <-inner[1].Nacked():
	default:
		require.FailNow(t, "a failed delivery nacks its message")
	}
	require.Equal(t, source.Published("EVENTS", 9, false), source.OutcomeOf(inner[0]))
	require.Equal(t, source.Retryable, source.OutcomeOf(inner[1]).Class)
	select {
	case <-inner[2].Acked():
		require.FailNow(t, "a delivery not reported yet left its message alone")
	case <-inner[2].Nacked():
		require.FailNow(t, "a delivery not reported yet left its message alone")
	default:
	}
	first.At(2).Report(source.Published("EVENTS", 10, false))
	<-first.Done()
}
