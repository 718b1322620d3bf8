package table

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-bridge/bridge/internal/source"
)

// Collectors exposes the subscriber's counters as Prometheus metrics:
// bridge_rows_relayed_total, bridge_rows_deduplicated_total,
// bridge_rows_failed_total{class} (retryable; permanent, also counted by
// bridge_rows_dead_total; unavailable: given back without counting the
// attempt, because NATS was down or the relay shut down; held: held back
// without counting the attempt, because the row's stream is unsafe),
// bridge_rows_requeued_total, bridge_marks_fenced_total,
// bridge_rows_claimed_total and the gauges bridge_inflight_rows and
// bridge_inflight_bytes.
func (s *Subscriber) Collectors() []prometheus.Collector {
	counter := func(name, help string, v func() int64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(v()) })
	}
	c := &s.Counters
	const failedHelp = "Failed publish attempts recorded, by class."
	return []prometheus.Collector{
		counter("bridge_rows_relayed_total", "Rows marked done (or deleted) after a PubAck.", c.Relayed.Load, nil),
		counter("bridge_rows_deduplicated_total", "Relayed rows whose PubAck said duplicate: JetStream already held their Nats-Msg-Id.", c.Deduplicated.Load, nil),
		counter("bridge_rows_failed_total", failedHelp, c.Failed.Load, prometheus.Labels{"class": string(source.Retryable)}),
		counter("bridge_rows_failed_total", failedHelp, c.Dead.Load, prometheus.Labels{"class": string(source.Permanent)}),
		counter("bridge_rows_failed_total", failedHelp, c.Released.Load, prometheus.Labels{"class": string(source.Unavailable)}),
		counter("bridge_rows_failed_total", failedHelp, c.Held.Load, prometheus.Labels{"class": string(source.Held)}),
		counter("bridge_rows_dead_total", "Rows moved to permanent_failed (dead letters).", c.Dead.Load, nil),
		counter("bridge_rows_requeued_total", "In-flight rows requeued after their lease (inflight_timeout) expired.", c.Requeued.Load, nil),
		counter("bridge_marks_fenced_total", "Marks that matched no row because the lease had been taken over.", c.Fenced.Load, nil),
		counter("bridge_rows_claimed_total", "Rows claimed.", c.Claimed.Load, nil),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_inflight_rows", Help: "Rows claimed by this relay and not yet settled."},
			func() float64 { return float64(s.outstanding.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_inflight_bytes", Help: "Bytes (payloads and headers) of the rows claimed by this relay and not yet settled; bounded by relay.max_in_flight_bytes."},
			func() float64 { return float64(s.outstandingBytes.Load()) }),
	}
}
