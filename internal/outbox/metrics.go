package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

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
