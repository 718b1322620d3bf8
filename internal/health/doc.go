// Package health serves the relay's operational HTTP endpoints:
// /healthz (the process is alive), /readyz (every readiness check passes
// and the relay is not draining), /metrics (Prometheus) and /debug/pprof/
// (Go's profiler, to loopback clients only).
package health
