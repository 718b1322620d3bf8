// Package telemetry sets up OpenTelemetry tracing for the relay.
//
// Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; then spans are exported over
// OTLP/HTTP, configured by the standard OTEL_* variables. A row whose
// headers carry a W3C traceparent (and tracestate) gets its claim and
// publish spans as children of that trace; the headers themselves reach
// the stream unchanged.
package telemetry
