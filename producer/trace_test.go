package producer_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-bridge/bridge/producer"
)

func spanContext(t *testing.T, state string) context.Context {
	t.Helper()
	ts, err := trace.ParseTraceState(state)
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceState: ts,
	})
	return trace.ContextWithSpanContext(context.Background(), sc)
}

func TestInjectTraceContext(t *testing.T) {
	t.Parallel()
	const parent = "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-00"

	// No span: the headers are returned as they are.
	require.Nil(t, producer.InjectTraceContext(context.Background(), nil))
	h := producer.Header{"traceparent": {"kept"}}
	require.Equal(t, producer.Header{"traceparent": {"kept"}}, producer.InjectTraceContext(context.Background(), h))

	// Nil headers: a new Header.
	got := producer.InjectTraceContext(spanContext(t, "a=1"), nil)
	require.Equal(t, producer.Header{"traceparent": {parent}, "tracestate": {"a=1"}}, got)

	// Existing trace headers are replaced whatever their case; a stale
	// tracestate goes when the span has none; other headers stay.
	h = producer.Header{"Traceparent": {"old"}, "TRACESTATE": {"old=1"}, "traceparent": {"older"}, "X": {"1"}}
	got = producer.InjectTraceContext(spanContext(t, ""), h)
	require.Equal(t, producer.Header{"traceparent": {parent}, "X": {"1"}}, got)
	require.Equal(t, got, h, "a non-nil Header is filled in place")
}
