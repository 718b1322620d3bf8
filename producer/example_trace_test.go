package producer_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-bridge/bridge/producer"
)

// InjectTraceContext puts the current span's W3C trace context into an
// event's headers; the relay forwards them to NATS unchanged. In a service
// the span comes from the tracer (tracer.Start(ctx, …)); here it is fixed.
func ExampleInjectTraceContext() {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)

	ev := producer.Event{
		Subject: "events.order.created",
		Headers: producer.Header{"Content-Type": {"application/json"}},
	}
	ev.Headers = producer.InjectTraceContext(ctx, ev.Headers)
	fmt.Println("traceparent:", ev.Headers["traceparent"][0])
	fmt.Println("Content-Type:", ev.Headers["Content-Type"][0])
	// Output:
	// traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	// Content-Type: application/json
}
