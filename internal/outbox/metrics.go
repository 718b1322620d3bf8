package outbox

import (
	"context"
	"sync"
	"time"

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

// TableCollector reports the table as a whole, from Store.Stats:
// bridge_outbox_rows{status}, bridge_relay_lag_seconds (the age of the
// oldest row not yet relayed nor dead — pending, in flight or failed — on
// the database clock; 0 when there is none) and
// bridge_outbox_stats_age_seconds (how old those values are). The counts
// scan the table, so they are read at most every refresh interval, in the
// background with a 5 s query timeout: a scrape never waits for the
// database, except for the first read. While the table cannot be read
// (the database is down, or SQLite's write lock is held), the last values
// are kept and their age grows, and the lag grows with it: the oldest
// unsettled row can only have got older, as nothing can be marked relayed
// meanwhile.
type TableCollector struct {
	store   *Store
	refresh time.Duration
	rows    *prometheus.Desc
	lag     *prometheus.Desc
	age     *prometheus.Desc

	mu      sync.Mutex
	at      time.Time     // of the last successful read
	tried   time.Time     // of the last read begun
	reading chan struct{} // closed when the read in progress ends; nil when none
	stats   Stats
}

// NewTableCollector returns a collector reading at most every refresh.
func NewTableCollector(store *Store, refresh time.Duration) *TableCollector {
	return &TableCollector{
		store:   store,
		refresh: refresh,
		rows:    prometheus.NewDesc("bridge_outbox_rows", "Rows in the outbox table, by status.", []string{"status"}, nil),
		lag:     prometheus.NewDesc("bridge_relay_lag_seconds", "Age of the oldest unsettled (pending, in flight or failed) row in the outbox table; while the table cannot be read, the last value plus the time since.", nil, nil),
		age:     prometheus.NewDesc("bridge_outbox_stats_age_seconds", "Seconds since bridge_outbox_rows and bridge_relay_lag_seconds were last read from the table.", nil, nil),
	}
}

// Inherit takes over the last values prev (the collector of an earlier
// relay of this process) read.
func (c *TableCollector) Inherit(prev *TableCollector) {
	prev.mu.Lock()
	st, at := prev.stats, prev.at
	prev.mu.Unlock()
	c.mu.Lock()
	if c.at.IsZero() {
		c.stats, c.at = st, at
	}
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *TableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rows
	ch <- c.lag
	ch <- c.age
}

// Collect implements prometheus.Collector.
func (c *TableCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if c.reading == nil && time.Since(c.tried) >= c.refresh {
		c.tried, c.reading = time.Now(), make(chan struct{})
		go c.read(c.reading)
	}
	first, reading := c.at.IsZero(), c.reading
	c.mu.Unlock()
	if first && reading != nil {
		select { // the first read: wait for it, a little
		case <-reading:
		case <-time.After(5 * time.Second):
		}
	}
	c.mu.Lock()
	st, at := c.stats, c.at
	c.mu.Unlock()
	if at.IsZero() {
		return // never read: no value is better than a wrong one
	}
	stale := time.Since(at)
	lag := st.OldestUnsettled
	if lag > 0 && stale > 2*c.refresh {
		lag += stale
	}
	for _, status := range Statuses {
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(st.Rows[status]), string(status))
	}
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, lag.Seconds())
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, stale.Seconds())
}

func (c *TableCollector) read(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	st, err := c.store.Stats(ctx, 0)
	cancel()
	c.mu.Lock()
	if err == nil {
		c.stats, c.at = st, time.Now()
	}
	c.reading = nil
	c.mu.Unlock()
	close(done)
}
