package dedup

import "github.com/prometheus/client_golang/prometheus"

// Collectors expose bridge_dedup_guard_violations_total and the gauge
// bridge_dedup_unsafe_streams.
func (g *Guard) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bridge_dedup_guard_violations_total",
			Help: "Streams found unable to deduplicate the relay's republishes (dedup.guard), each stream and problem once."},
			func() float64 { return float64(g.Violations.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_dedup_unsafe_streams",
			Help: "Streams whose rows the relay holds back now because they cannot deduplicate its republishes (dedup.guard: refuse)."},
			func() float64 { return float64(len(g.Unsafe())) }),
	}
}

// Collectors expose bridge_rows_reconciled_total,
// bridge_reconcile_incomplete_total, bridge_reconcile_unresolved_total and
// bridge_reconcile_scans_failed_total.
func (r *Reconciler) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bridge_rows_reconciled_total",
			Help: "Rows in doubt found in their stream and marked relayed without publishing again."},
			func() float64 { return float64(r.Reconciled.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bridge_reconcile_incomplete_total",
			Help: "Reconcile scans stopped by dedup.reconcile_max_messages or dedup.reconcile_timeout."},
			func() float64 { return float64(r.Incomplete.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bridge_reconcile_unresolved_total",
			Help: "Rows in doubt whose stream could not be found (no stream captures the subject, or an account subject mapping hides it), published again without a scan."},
			func() float64 { return float64(r.Unresolved.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bridge_reconcile_scans_failed_total",
			Help: "Reconcile scans whose stream info, consumer or fetches kept failing until the scan's bound (no responders, no leader): their rows are held back and tried again, not republished."},
			func() float64 { return float64(r.ScansFailed.Load()) }),
	}
}
