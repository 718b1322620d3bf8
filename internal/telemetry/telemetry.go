package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/wire"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ProviderSet builds the tracer.
var ProviderSet = wire.NewSet(ProvideTracer)

// TracerName names the relay's tracer (instrumentation scope).
const TracerName = "github.com/outbox-bridge/bridge"

// Enabled reports whether an OTLP endpoint is configured in the environment.
func Enabled() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// ProvideTracer returns the relay's tracer: exporting over OTLP/HTTP when
// Enabled, a no-op tracer otherwise. The cleanup flushes pending spans
// (at most 5 s).
func ProvideTracer(ctx context.Context, logger *slog.Logger) (trace.Tracer, func(), error) {
	if !Enabled() {
		return noop.NewTracerProvider().Tracer(TracerName), func() {}, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("OpenTelemetry OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName("outbox-bridge")))
	if err != nil {
		return nil, nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	logger.Info("exporting traces over OTLP")
	return tp.Tracer(TracerName), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			logger.Warn("flush traces", slog.Any("error", err))
		}
	}, nil
}

// Parent returns ctx carrying the remote span context of a row's
// traceparent/tracestate headers, or ctx unchanged when they are absent or
// malformed.
func Parent(ctx context.Context, headers map[string][]string) context.Context {
	if len(headers) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, headerCarrier(headers))
}

// headerCarrier reads a row's headers, whose names keep the row's case.
type headerCarrier map[string][]string

func (h headerCarrier) Get(key string) string {
	for name, values := range h {
		if len(values) > 0 && strings.EqualFold(name, key) {
			return values[0]
		}
	}
	return ""
}

func (h headerCarrier) Set(string, string) {}

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
