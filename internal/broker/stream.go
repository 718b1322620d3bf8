package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/secret"
)

// StreamSpec is a stream the relay creates when it is missing.
type StreamSpec struct {
	Name     string
	Subjects []string
	// Duplicates is the duplicate window; 0 means the server default (2 min).
	Duplicates time.Duration
	// Replicas is the number of replicas; 0 means auto (see ClusterReplicas),
	// resolved by EnsureStreams.
	Replicas int
	// Storage is "file" (default) or "memory".
	Storage string
	// MaxAge is how long messages are kept; 0 means forever.
	MaxAge time.Duration
	// Drift is set by EnsureStreams when the stream exists with other
	// settings than these (replicas, storage, subjects, duplicate window):
	// what differs, in words; "" when it matches or was created.
	Drift string
}

// serverDuplicatesDefault is the duplicate window nats-server gives a
// stream created without one (server/stream.go, StreamDefaultDuplicatesWindow).
const serverDuplicatesDefault = server.StreamDefaultDuplicatesWindow

// ClusterReplicas is the replicas of a stream configured with replicas 0
// (auto) on the server nc is connected to: 3 when it is one of a cluster of
// three or more servers, 1 otherwise. The server says so itself in the INFO
// it sends the client (nats-server server/server.go: "cluster" names the
// cluster, and "connect_urls" lists the client URLs of every server of the
// cluster, which nats.go adds to its pool, nats.go Conn.Servers); a
// cluster that hides its URLs (no_advertise) counts the URLs the relay was
// given.
func ClusterReplicas(nc *nats.Conn) int {
	if nc == nil || nc.ConnectedClusterName() == "" {
		return 1
	}
	if len(nc.Servers()) >= 3 {
		return 3
	}
	return 1
}

// EnsureStreams creates each stream that does not exist, with limits
// retention, and resolves each spec's replicas 0 (auto) in place (see
// ClusterReplicas). An existing stream is left as it is (its settings may
// have been tuned by an operator) and logged with its subjects; when it
// differs from the spec — subjects it does not capture (rows on them will
// find no stream), other replicas, storage or duplicate window — the log
// line is a warning naming what differs, and the spec's Drift says it
// (readiness reports it as degraded, and bridge_stream_config_drift counts
// it).
func EnsureStreams(ctx context.Context, js jetstream.JetStream, specs []StreamSpec, logger *slog.Logger) error {
	replicas := ClusterReplicas(js.Conn())
	for i := range specs {
		spec := &specs[i]
		if spec.Replicas == 0 {
			spec.Replicas = replicas
		}
		info, err := js.Stream(ctx, spec.Name)
		if err == nil {
			cfg := info.CachedInfo().Config
			if spec.Drift = drift(*spec, cfg); spec.Drift != "" {
				logger.Warn("stream present with other settings than configured; the bridge does not change existing streams",
					slog.String("stream", spec.Name), slog.String("differs", spec.Drift), slog.Any("subjects_not_covered", uncovered(spec.Subjects, cfg.Subjects)),
					slog.Any("subjects", cfg.Subjects), slog.Int("replicas", cfg.Replicas), slog.String("storage", strings.ToLower(cfg.Storage.String())),
					slog.Duration("duplicate_window", cfg.Duplicates),
					slog.String("fix", "edit the stream (nats stream edit; storage cannot change: copy it to a new stream), or the stream's configuration"))
				continue
			}
			logger.Info("stream present", slog.String("stream", spec.Name), slog.Any("subjects", cfg.Subjects),
				slog.Int("replicas", cfg.Replicas), slog.Duration("duplicate_window", cfg.Duplicates))
			continue
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("look up stream %s: %w", spec.Name, err)
		}
		if err := createStream(ctx, js, *spec); err != nil {
			return err
		}
		logger.Info("stream created", slog.String("stream", spec.Name), slog.Any("subjects", spec.Subjects), slog.Int("replicas", spec.Replicas))
	}
	return nil
}

// drift says how the existing stream cfg differs from spec, "" when it
// does not.
func drift(spec StreamSpec, cfg jetstream.StreamConfig) string {
	var parts []string
	if missing := uncovered(spec.Subjects, cfg.Subjects); len(missing) > 0 {
		parts = append(parts, fmt.Sprintf("subjects %s not captured (stream has %s)", strings.Join(missing, ","), strings.Join(cfg.Subjects, ",")))
	}
	if want := max(spec.Replicas, 1); cfg.Replicas != want {
		parts = append(parts, fmt.Sprintf("replicas %d, configured %d", cfg.Replicas, want))
	}
	if want := cmpStorage(spec.Storage); strings.ToLower(cfg.Storage.String()) != want {
		parts = append(parts, fmt.Sprintf("storage %s, configured %s", strings.ToLower(cfg.Storage.String()), want))
	}
	if want := cmp.Or(spec.Duplicates, serverDuplicatesDefault); cfg.Duplicates != want {
		parts = append(parts, fmt.Sprintf("duplicate window %s, configured %s", cfg.Duplicates, want))
	}
	return strings.Join(parts, "; ")
}

// uncovered returns the subjects of requested that no subject of the
// stream covers: a requested subject is covered when it is a subset of one
// stream subject (events.a and events.* are covered by events.>), by
// nats-server's own subset test (server.SubjectMatchesFilter, which takes
// wildcards on both sides). A subject covered only by several stream
// subjects together is reported too.
func uncovered(requested, stream []string) []string {
	var out []string
	for _, r := range requested {
		if !slices.ContainsFunc(stream, func(s string) bool { return server.SubjectMatchesFilter(r, s) }) {
			out = append(out, r)
		}
	}
	return out
}

// redactNATSURL hides passwords and tokens in nats:// URLs; see
// secret.RedactNATSURLs.
func redactNATSURL(raw string) string { return secret.RedactNATSURLs(raw) }
