package producer

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceContext is the W3C Trace Context propagator
// (https://www.w3.org/TR/trace-context/): headers traceparent and
// tracestate.
var traceContext = propagation.TraceContext{}

// InjectTraceContext copies the OpenTelemetry span context of ctx into h as
// the W3C Trace Context headers "traceparent" and, when the span has one,
// "tracestate", and returns h (a new Header when h is nil). The relay
// forwards them to the NATS message unchanged, so a consumer that extracts
// them continues the producer's trace; a relay that exports traces
// (OTEL_EXPORTER_OTLP_ENDPOINT) records its claim and publish spans in it
// too.
//
// Any traceparent or tracestate already in h, whatever the case of its
// name, is replaced. When ctx holds no valid span context, h is returned
// as it is. Baggage is not copied; set it yourself with another propagator
// if you need it.
//
//	ev.Headers = producer.InjectTraceContext(ctx, ev.Headers)
func InjectTraceContext(ctx context.Context, h Header) Header {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return h
	}
	if h == nil {
		h = Header{}
	}
	for _, field := range traceContext.Fields() {
		headerCarrier(h).del(field)
	}
	traceContext.Inject(ctx, headerCarrier(h))
	return h
}

// headerCarrier lets a propagator write into a Header. Names are matched
// case-insensitively and written as the propagator names them (lower
// case).
type headerCarrier Header

var _ propagation.TextMapCarrier = headerCarrier(nil)

func (c headerCarrier) Get(key string) string {
	for name, values := range c {
		if strings.EqualFold(name, key) && len(values) > 0 {
			return values[0]
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	c.del(key)
	c[key] = []string{value}
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for name := range c {
		keys = append(keys, name)
	}
	return keys
}

func (c headerCarrier) del(key string) {
	for name := range c {
		if strings.EqualFold(name, key) {
			delete(c, name)
		}
	}
}
