package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// Flag names read by Load besides the ones in flagKeys.
const (
	flagConfig       = "config"
	flagEnsureStream = "ensure-stream"
)

// flagKeys maps each configuration flag to its YAML key.
var flagKeys = map[string]string{
	"data-dir":         "data_dir",
	"database-url":     "database.url",
	"table":            "database.table",
	"nats-url":         "nats.url",
	"nats-listen":      "nats.listen",
	"batch-size":       "relay.batch_size",
	"poll-interval":    "relay.poll_interval",
	"inflight-timeout": "relay.inflight_timeout",
	"http-listen":      "http.listen",
	"log-level":        "log.level",
}

// RegisterFlags adds every configuration flag to fs: RegisterCommonFlags and
// RegisterRelayFlags. Load reads only the flags the user set, so the
// defaults shown in the help never override the file or the environment.
func RegisterFlags(fs *pflag.FlagSet) {
	RegisterCommonFlags(fs)
	RegisterRelayFlags(fs)
}

// RegisterCommonFlags adds the flags every command reads: --config,
// --data-dir, --database-url, --table, --nats-url, --nats-listen and
// --log-level.
func RegisterCommonFlags(fs *pflag.FlagSet) {
	fs.String(flagConfig, "",
		"YAML configuration `file`; BRIDGE_* variables and flags override its keys (default none)")
	fs.String("data-dir", DataDirDefault,
		"`directory` of the embedded defaults: SQLite outbox and JetStream store"+envHelp("data_dir"))
	fs.String("database-url", "",
		"outbox database `url`: postgres://…, postgresql://…, mysql://… or sqlite:PATH"+
			" (default sqlite:<data-dir>/outbox.db)"+envHelp("database.url"))
	fs.String("table", TableDefault,
		"outbox table `name`, optionally schema-qualified (schema.table)"+envHelp("database.table"))
	fs.String("nats-url", NATSURLDefault,
		"NATS `url`s, comma-separated for a cluster, or embedded to run an in-process server"+envHelp("nats.url"))
	fs.String("nats-listen", NATSListenDefault,
		"client `address` host:port of the embedded NATS server"+envHelp("nats.listen"))
	fs.String("log-level", LogLevelDefault,
		"log `level`: debug, info, warn or error"+envHelp("log.level"))
}

// RegisterRelayFlags adds the flags only the relay reads (bridge run, and
// bridge config to show their effect): --ensure-stream (repeatable),
// --batch-size, --poll-interval, --inflight-timeout and --http-listen.
func RegisterRelayFlags(fs *pflag.FlagSet) {
	fs.StringArray(flagEnsureStream, nil,
		"create stream `NAME:SUBJ[,SUBJ]` when missing (duplicates 2m, 1 replica, file storage);"+
			" repeatable; replaces the streams of the file (default EVENTS:events.> with embedded NATS; no variable)")
	fs.Int("batch-size", BatchSizeDefault,
		"rows claimed at once, 1 to 100000"+envHelp("relay.batch_size"))
	fs.Duration("poll-interval", PollIntervalDefault,
		"idle wait between empty claims"+envHelp("relay.poll_interval"))
	fs.Duration("inflight-timeout", InflightTimeoutDefault,
		"lease length; older in_flight rows are requeued"+envHelp("relay.inflight_timeout"))
	fs.String("http-listen", HTTPListenDefault,
		"`address` host:port of /healthz, /readyz and /metrics"+envHelp("http.listen"))
}

func envHelp(key string) string { return "; env " + EnvName(key) }

// ParseStreamFlag parses an --ensure-stream value "NAME:SUBJ[,SUBJ]" into a Stream with the
// stream defaults (duplicates 2m, 1 replica, file storage). It checks the shape only;
// Validate checks the name and subjects. The error is an *Error.
func ParseStreamFlag(s string) (Stream, error) {
	name, subjects, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	var subs []string
	for sub := range strings.SplitSeq(subjects, ",") {
		if sub = strings.TrimSpace(sub); sub != "" {
			subs = append(subs, sub)
		}
	}
	if slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(sub, ":") }) {
		return Stream{}, &Error{
			Key:     "--" + flagEnsureStream,
			Value:   s,
			Allowed: "must name one stream, NAME:SUBJECT[,SUBJECT…]; give each stream its own --" + flagEnsureStream + " (a subject here may not contain ':')",
		}
	}
	if !ok || name == "" || len(subs) == 0 {
		return Stream{}, &Error{
			Key:     "--" + flagEnsureStream,
			Value:   s,
			Allowed: fmt.Sprintf("must be NAME:SUBJECT[,SUBJECT…] such as %s:%s", EmbeddedStreamName, EmbeddedStreamSubject),
		}
	}
	return Stream{
		Name:       name,
		Subjects:   subs,
		Duplicates: StreamDuplicatesDefault,
		Replicas:   StreamReplicasDefault,
		Storage:    StreamStorageDefault,
	}, nil
}
