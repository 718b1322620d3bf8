package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
		counter("bridge_rows_failed_total", failedHelp, c.Failed.Load, prometheus.Labels{"class": string(Retryable)}),
		counter("bridge_rows_failed_total", failedHelp, c.Dead.Load, prometheus.Labels{"class": string(Permanent)}),
		counter("bridge_rows_failed_total", failedHelp, c.Released.Load, prometheus.Labels{"class": string(Unavailable)}),
		counter("bridge_rows_failed_total", failedHelp, c.Held.Load, prometheus.Labels{"class": string(Held)}),
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

// TableCollector reports the table as a whole, from Store.Stats:
// bridge_outbox_rows{status} and bridge_relay_lag_seconds (the age of the
// oldest row not yet relayed nor dead, pending or failed, on the database
// clock; 0 when there is none). The
// counts scan the table, so they are refreshed at most every refresh
// interval, whatever the scrape rate, with a 5 s query timeout; a failed
// refresh keeps the last values.
type TableCollector struct {
	store   *Store
	refresh time.Duration
	rows    *prometheus.Desc
	lag     *prometheus.Desc

	mu    sync.Mutex
	at    time.Time
	stats Stats
}

// NewTableCollector returns a collector refreshing at most every refresh.
func NewTableCollector(store *Store, refresh time.Duration) *TableCollector {
	return &TableCollector{
		store:   store,
		refresh: refresh,
		rows:    prometheus.NewDesc("bridge_outbox_rows", "Rows in the outbox table, by status.", []string{"status"}, nil),
		lag:     prometheus.NewDesc("bridge_relay_lag_seconds", "Age of the oldest unsettled (pending or failed) row in the outbox table.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *TableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rows
	ch <- c.lag
}

// Collect implements prometheus.Collector.
func (c *TableCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if time.Since(c.at) >= c.refresh {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if st, err := c.store.Stats(ctx, 0); err == nil {
			c.stats, c.at = st, time.Now()
		}
		cancel()
	}
	st := c.stats
	c.mu.Unlock()
	for _, status := range Statuses {
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(st.Rows[status]), string(status))
	}
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, st.OldestUnsettled.Seconds())
}
