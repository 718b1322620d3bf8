package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/secret"
)

// StreamSpec is a stream the relay creates when it is missing.
type StreamSpec struct {
	Name     string
	Subjects []string
	// Duplicates is the duplicate window; 0 means the server default (2 min).
	Duplicates time.Duration
	// Replicas defaults to 1.
	Replicas int
	// Storage is "file" (default) or "memory".
	Storage string
	// MaxAge is how long messages are kept; 0 means forever.
	MaxAge time.Duration
}

// EnsureStreams creates each stream that does not exist, with limits
// retention. An existing stream is left as it is (its settings may have
// been tuned by an operator) and logged with its subjects; when it does
// not capture every subject the spec asks for, the log line is a warning
// naming the subjects left out, since rows on them will find no stream.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, specs []StreamSpec, logger *slog.Logger) error {
	for _, spec := range specs {
		info, err := js.Stream(ctx, spec.Name)
		if err == nil {
			cfg := info.CachedInfo().Config
			if missing := uncovered(spec.Subjects, cfg.Subjects); len(missing) > 0 {
				logger.Warn("stream present but does not capture some requested subjects; the bridge does not change existing streams",
					slog.String("stream", spec.Name), slog.Any("subjects_not_covered", missing),
					slog.Any("subjects", cfg.Subjects), slog.Duration("duplicate_window", cfg.Duplicates),
					slog.String("fix", "add the subjects to the stream (nats stream edit), or ensure them in a stream of another name"))
				continue
			}
			logger.Info("stream present", slog.String("stream", spec.Name), slog.Any("subjects", cfg.Subjects),
				slog.Duration("duplicate_window", cfg.Duplicates))
			continue
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("look up stream %s: %w", spec.Name, err)
		}
		if err := createStream(ctx, js, spec); err != nil {
			return err
		}
		logger.Info("stream created", slog.String("stream", spec.Name), slog.Any("subjects", spec.Subjects))
	}
	return nil
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
