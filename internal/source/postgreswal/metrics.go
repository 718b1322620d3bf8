package postgreswal

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors exposes the subscriber's counters as Prometheus metrics. The
// names the table source has mean the same here: bridge_rows_relayed_total,
// bridge_rows_deduplicated_total, bridge_rows_failed_total{class}
// (retryable; permanent, also counted by bridge_rows_dead_total;
// unavailable: NATS was unreachable; held: the stream refused the row for
// now; neither counted as an attempt),
// bridge_rows_dead_total and the gauges bridge_inflight_rows (messages
// awaiting their outcome) and bridge_inflight_bytes (payloads and headers
// of the rows read and not yet settled that are held, bounded by
// MaxInFlightBytes). Its own: bridge_wal_rows_read_total,
// bridge_wal_rows_swept_total, bridge_wal_stream_restarts_total and the
// gauges bridge_wal_slot_lag_seconds (see LagSeconds),
// bridge_wal_publication_ok (publication.go) and
// bridge_wal_mark_wait_seconds (how long the write of marks in progress
// has waited; 0 when none).
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
		counter("bridge_rows_failed_total", failedHelp, c.Failed.Load, prometheus.Labels{"class": "retryable"}),
		counter("bridge_rows_failed_total", failedHelp, c.Dead.Load, prometheus.Labels{"class": "permanent"}),
		counter("bridge_rows_failed_total", failedHelp, c.Unavailable.Load, prometheus.Labels{"class": "unavailable"}),
		counter("bridge_rows_failed_total", failedHelp, c.Held.Load, prometheus.Labels{"class": "held"}),
		counter("bridge_rows_dead_total", "Rows moved to permanent_failed (dead letters).", c.Dead.Load, nil),
		counter("bridge_wal_rows_read_total", "Outbox rows read from the replication slot (again after a restart of the stream).", c.Read.Load, nil),
		counter("bridge_wal_rows_swept_total", "Pending rows the replication slot did not deliver, published by the sweep.", c.Swept.Load, nil),
		counter("bridge_wal_stream_restarts_total", "Replication streams started again after an interruption.", c.Restarts.Load, nil),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_inflight_rows", Help: "Messages handed to the publisher and awaiting their outcome."},
			func() float64 { return float64(s.emitted.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_inflight_bytes", Help: "Bytes (payloads and headers) of the rows read from the replication slot (or by the sweep) and not yet settled that the relay holds; bounded by relay.max_in_flight_bytes."},
			func() float64 { _, b := s.budget.held(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_wal_rows_set_aside", ConstLabels: prometheus.Labels{"reason": "failed"},
			Help: "Rows set aside: failed for reasons of their own (no stream, refused by it), marked failed and retried by the sweep after their backoff, while the rows after them go on (reason failed); rows of their ordering keys waiting for them (reason waiting)."},
			func() float64 { return float64(asideCount(s.asideSum.Load(), false)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_wal_rows_set_aside", ConstLabels: prometheus.Labels{"reason": "waiting"},
			Help: "Rows set aside: failed for reasons of their own (no stream, refused by it), marked failed and retried by the sweep after their backoff, while the rows after them go on (reason failed); rows of their ordering keys waiting for them (reason waiting)."},
			func() float64 { return float64(asideCount(s.asideSum.Load(), true)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_wal_publication_ok",
			Help: "1 while the publication publishes the outbox table's inserts, 0 when it is dropped or leaves them out (read every 5 s; /readyz names the fix)."},
			func() float64 {
				if s.PublicationFault() != "" {
					return 0
				}
				return 1
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_wal_slot_lag_seconds",
			Help: "Age (commit time, database clock) of the oldest row read from the replication slot and not yet relayed; 0 when none waits."},
			s.LagSeconds),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_wal_mark_wait_seconds", Help: "How long the write of marks in progress has waited for the database; 0 when none."},
			func() float64 { return s.markWrites.Running().Seconds() }),
	}
}

// SlotCollector reports the replication slot from pg_replication_slots:
// bridge_wal_slot_retained_bytes (WAL the server keeps for the slot, from
// its restart position), bridge_wal_slot_unconfirmed_bytes (WAL written
// since its confirmed position) and bridge_wal_slot_active (1 while a
// relay streams from it). The query runs at most every refresh interval,
// with a 5 s timeout; a failed one keeps the last values.
type SlotCollector struct {
	db      *sql.DB
	slot    string
	refresh time.Duration

	retained, unconfirmed, active *prometheus.Desc

	mu   sync.Mutex
	at   time.Time
	info SlotInfo
	ok   bool
}

// NewSlotCollector returns a collector of slot in db, refreshing at most
// every refresh.
func NewSlotCollector(db *sql.DB, slot string, refresh time.Duration) *SlotCollector {
	return &SlotCollector{
		db: db, slot: slot, refresh: refresh,
		retained: prometheus.NewDesc("bridge_wal_slot_retained_bytes",
			"WAL the server keeps for the replication slot (from its restart position); bounded by max_slot_wal_keep_size.", nil, nil),
		unconfirmed: prometheus.NewDesc("bridge_wal_slot_unconfirmed_bytes",
			"WAL written since the replication slot's confirmed position: what the relay has yet to read, publish and confirm.", nil, nil),
		active: prometheus.NewDesc("bridge_wal_slot_active", "1 while a connection streams from the replication slot.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *SlotCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.retained
	ch <- c.unconfirmed
	ch <- c.active
}

// Collect implements prometheus.Collector.
func (c *SlotCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if time.Since(c.at) >= c.refresh {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if info, err := SlotStatus(ctx, c.db, c.slot); err == nil {
			c.info, c.ok, c.at = info, true, time.Now()
		}
		cancel()
	}
	info, ok := c.info, c.ok
	c.mu.Unlock()
	if !ok {
		return
	}
	active := 0.0
	if info.Active {
		active = 1
	}
	ch <- prometheus.MustNewConstMetric(c.retained, prometheus.GaugeValue, float64(info.RetainedBytes))
	ch <- prometheus.MustNewConstMetric(c.unconfirmed, prometheus.GaugeValue, float64(info.UnconfirmedBytes))
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, active)
}
