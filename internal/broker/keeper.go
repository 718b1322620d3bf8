package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// KeeperIntervalDefault is how often a Keeper checks that the streams it
// owns exist.
const KeeperIntervalDefault = 30 * time.Second

// keeperLookupInterval spaces the lookups one stream gets from Missing.
const keeperLookupInterval = time.Second

// Keeper creates again the streams the relay owns (streams /
// --ensure-stream) when they are lost while it runs: a stream with memory
// storage is gone after a NATS server restart, and operators delete
// streams by hand. Without it the relay reconnects, its publishes find no
// stream, and the rows become dead letters.
//
// A re-created stream is empty: what the lost one held, and the
// Nats-Msg-Ids it knew, are gone.
type Keeper struct {
	js     jetstream.JetStream
	specs  []StreamSpec
	logger *slog.Logger

	mu       sync.Mutex
	looked   map[string]time.Time    // stream → last lookup from Missing
	streams  map[string]*streamState // stream → what the outage watch knows (outage.go)
	subjects map[string]string       // subject → the stream a PubAck named

	// Recreated counts streams created again.
	Recreated atomic.Int64
}

// NewKeeper returns a keeper of specs (the streams ensured at start).
func NewKeeper(js jetstream.JetStream, specs []StreamSpec, logger *slog.Logger) *Keeper {
	return &Keeper{js: js, specs: slices.Clone(specs), logger: logger, looked: map[string]time.Time{},
		streams: map[string]*streamState{}, subjects: map[string]string{}}
}

// Missing is told that a publish to subject found no stream. When a stream
// the keeper owns captures subject and does not exist, it is created
// again; the rows are then published at their next attempt. Each stream is
// looked up at most once a second, however many publishes fail.
func (k *Keeper) Missing(ctx context.Context, subject string) {
	for _, spec := range k.specs {
		if !slices.ContainsFunc(spec.Subjects, func(f string) bool { return server.SubjectMatchesFilter(subject, f) }) {
			continue
		}
		k.mu.Lock()
		recent := time.Since(k.looked[spec.Name]) < keeperLookupInterval
		if !recent {
			k.looked[spec.Name] = time.Now()
		}
		k.mu.Unlock()
		if !recent {
			k.restore(ctx, spec)
		}
		return
	}
}

// Run checks every interval, until ctx ends, that each owned stream
// exists, and creates the missing ones; and every outageProbeEvery it
// watches the streams it knows for an outage (see Diagnose, Check).
func (k *Keeper) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	probe := time.NewTicker(outageProbeEvery)
	defer probe.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-probe.C:
			k.watch(ctx)
		case <-t.C:
			for _, spec := range k.specs {
				k.restore(ctx, spec)
			}
		}
	}
}

// restore creates spec when it does not exist.
func (k *Keeper) restore(ctx context.Context, spec StreamSpec) {
	_, err := k.js.Stream(ctx, spec.Name)
	if err == nil || ctx.Err() != nil {
		return
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		k.logger.Warn("cannot look up an ensured stream", slog.String("stream", spec.Name), slog.Any("error", err))
		return
	}
	if err := createStream(ctx, k.js, spec); err != nil {
		k.logger.Error("ensured stream is missing and cannot be created again", slog.String("stream", spec.Name),
			slog.Any("subjects", spec.Subjects), slog.Any("error", err))
		return
	}
	k.Recreated.Add(1)
	// What the watch knew of it (missing) is gone with it: the next
	// failure is diagnosed from a new stream info.
	k.mu.Lock()
	st := k.state(spec.Name)
	st.missing, st.checked = false, time.Time{}
	k.mu.Unlock()
	k.logger.Warn("ensured stream was missing (deleted, or memory storage lost in a server restart): created again, empty",
		slog.String("stream", spec.Name), slog.Any("subjects", spec.Subjects), slog.String("storage", cmpStorage(spec.Storage)))
}

func cmpStorage(s string) string {
	if s == "" {
		return "file"
	}
	return s
}

// Inherit takes over prev's count (the keeper of an earlier relay of this
// process).
func (k *Keeper) Inherit(prev *Keeper) { k.Recreated.Add(prev.Recreated.Load()) }

// Collector exposes bridge_streams_recreated_total,
// bridge_stream_config_drift{stream} (1 for an ensured stream that exists
// with other settings than configured) and bridge_stream_unavailable{stream}
// (1 while a stream is in an outage: no leader, no quorum, or publishes not
// acknowledged while the connection is up).
func (k *Keeper) Collector() prometheus.Collector { return keeperCollector{k} }

var (
	recreatedDesc = prometheus.NewDesc("bridge_streams_recreated_total",
		"Ensured streams found missing while the relay ran and created again (empty).", nil, nil)
	driftDesc = prometheus.NewDesc("bridge_stream_config_drift",
		"1 for an ensured stream that exists with other replicas, storage, subjects or duplicate window than configured (see the WARN line at start).", []string{"stream"}, nil)
	unavailableDesc = prometheus.NewDesc("bridge_stream_unavailable",
		"1 while the stream cannot take messages: no leader, no quorum, or no PubAck while the connection is up (its rows wait, attempts not counted).", []string{"stream"}, nil)
)

type keeperCollector struct{ k *Keeper }

func (c keeperCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- recreatedDesc
	ch <- driftDesc
	ch <- unavailableDesc
}

func (c keeperCollector) Collect(ch chan<- prometheus.Metric) {
	k := c.k
	ch <- prometheus.MustNewConstMetric(recreatedDesc, prometheus.CounterValue, float64(k.Recreated.Load()))
	for _, spec := range k.specs {
		v := 0.0
		if spec.Drift != "" {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(driftDesc, prometheus.GaugeValue, v, spec.Name)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for name, st := range k.streams {
		v := 0.0
		if !st.outSince.IsZero() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(unavailableDesc, prometheus.GaugeValue, v, name)
	}
}

// createStream creates spec with limits retention; a stream created
// meanwhile by someone else is not an error.
func createStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec) error {
	storage := jetstream.FileStorage
	if spec.Storage == "memory" {
		storage = jetstream.MemoryStorage
	}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       spec.Name,
		Subjects:   spec.Subjects,
		Retention:  jetstream.LimitsPolicy,
		Duplicates: spec.Duplicates,
		Replicas:   max(spec.Replicas, 1),
		Storage:    storage,
		MaxAge:     spec.MaxAge,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("create stream %s on %s: %w", spec.Name, strings.Join(spec.Subjects, ","), err)
	}
	return nil
}
