package mysqlbinlog

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors are the subscriber's metrics. The names the table source has
// mean the same here: bridge_rows_relayed_total,
// bridge_rows_deduplicated_total, bridge_rows_failed_total{class}
// (retryable; permanent, also counted by bridge_rows_dead_total),
// bridge_rows_dead_total. Its own: bridge_binlog_rows_read_total,
// bridge_binlog_rows_swept_total, bridge_binlog_rows_skipped_total,
// bridge_binlog_rows_set_aside_total, bridge_binlog_stream_restarts_total
// and the gauges bridge_binlog_lag_seconds (LagSeconds),
// bridge_binlog_reading (1 while this relay reads the log, 0 as a standby
// or while it cannot), bridge_binlog_rows_unmarked (rows published whose
// marks are not written yet) and bridge_binlog_mark_wait_seconds (how
// long the write of marks in progress has waited; 0 when none).
func (s *Subscriber) Collectors() []prometheus.Collector {
	counter := func(name, help string, f func() int64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(f()) })
	}
	c := &s.Counters
	const failedHelp = "Failed publish attempts by class: retryable (tried again or set aside), permanent (dead letters)."
	return []prometheus.Collector{
		counter("bridge_rows_relayed_total", "Rows marked done (or deleted) after a PubAck.", c.Relayed.Load, nil),
		counter("bridge_rows_deduplicated_total", "Relayed rows whose PubAck said duplicate: JetStream already held their Nats-Msg-Id.", c.Deduplicated.Load, nil),
		counter("bridge_rows_failed_total", failedHelp, c.Failed.Load, prometheus.Labels{"class": "retryable"}),
		counter("bridge_rows_failed_total", failedHelp, c.Dead.Load, prometheus.Labels{"class": "permanent"}),
		counter("bridge_rows_dead_total", "Rows moved to permanent_failed (dead letters).", c.Dead.Load, nil),
		counter("bridge_binlog_rows_read_total", "Outbox rows read from the binary log (again after a restart of the stream).", c.Read.Load, nil),
		counter("bridge_binlog_rows_swept_total", "Rows the binary log did not bring, published by the sweep.", c.Swept.Load, nil),
		counter("bridge_binlog_rows_skipped_total", "Rows read from the binary log that the table marks settled (read again after a restart): not published again.", c.Skipped.Load, nil),
		counter("bridge_binlog_rows_set_aside_total", "Rows set aside: failed for a reason of their own, or behind such a row of their ordering key; the sweep publishes them.", c.SetAside.Load, nil),
		counter("bridge_binlog_stream_restarts_total", "Binary log sessions started again after an interruption.", c.Restarts.Load, nil),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_binlog_lag_seconds", Help: "Age of the oldest row read from the binary log and not yet settled (its commit time); 0 when none."}, s.LagSeconds),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_binlog_rows_unmarked", Help: "Rows published whose marks (and the binary log position past them) are not written yet; publishing waits once 3 × relay.max_in_flight are."},
			func() float64 { return float64(s.unmarked.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_binlog_mark_wait_seconds", Help: "How long the write of marks in progress has waited for the database; 0 when none."},
			func() float64 { return s.marks.Running().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_binlog_reading", Help: "1 while this relay reads the binary log; 0 as a standby or while it cannot."}, func() float64 {
			if s.state.Load().streaming {
				return 1
			}
			return 0
		}),
	}
}

// LastProgress is when rows were last settled (the stall watch).
func (s *Subscriber) LastProgress() time.Time { return time.Unix(0, s.progress.Load()) }

// Stalled: a row of the table has been due for longer than after
// (outbox.Store.Stalled) and nothing moved; the cause names what the relay
// is doing.
func (s *Subscriber) Stalled(ctx context.Context, after time.Duration) (bool, string, error) {
	stalled, err := s.store.Stalled(ctx, after)
	if err != nil || !stalled {
		return false, "", err
	}
	st := s.state.Load()
	switch {
	case st.standby != "":
		return true, fmt.Sprintf("rows wait and this relay is a standby: %s reads the binary log", st.standby), nil
	case !st.streaming:
		return true, fmt.Sprintf("rows wait and this relay cannot read the binary log: %v", st.err), nil
	}
	if err := s.marksHealth(); err != nil {
		return true, fmt.Sprintf("rows wait while this relay's marks wait for the database: %v", err), nil
	}
	return true, "rows wait while this relay reads the binary log: nothing was settled", nil
}

// Excuse: a standby's stall is the holder's, and marks that fail (three in
// a row: each try is bounded, so a lock held by another session fails
// them too) fail for the database: a restart of this process changes
// neither. A write that merely runs long is no excuse: a session whose
// server stopped answering is healed by a restart.
func (s *Subscriber) Excuse() string {
	if st := s.state.Load(); st.standby != "" {
		return "standby: " + st.standby + " reads the binary log"
	}
	if s.marks.Failing() {
		return "marks fail"
	}
	return ""
}
