package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Flag names read by Load besides the ones in flagKeys.
const (
	flagConfig       = "config"
	flagEnsureStream = "ensure-stream"
	flagTable        = "table" // database.table or database.tables (Load)
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
	"source":           "source",
}

// RegisterFlags adds every configuration flag to fs: RegisterCommonFlags and
// RegisterRelayFlags. Load reads only the flags the user set, so the
// defaults shown in the help never override the file or the environment.
func RegisterFlags(fs *pflag.FlagSet) {
	RegisterCommonFlags(fs)
	RegisterRelayFlags(fs)
}

// RegisterCommonFlags adds the flags every command reads: --config,
// --data-dir, --database-url, --table, --source, --nats-url, --nats-listen
// and --log-level.
func RegisterCommonFlags(fs *pflag.FlagSet) {
	fs.String(flagConfig, "",
		"YAML configuration `file`; BRIDGE_* variables and flags override its keys (default none)")
	fs.String("data-dir", DataDirDefault,
		"`directory` of the embedded defaults: SQLite outbox and JetStream store"+envHelp("data_dir"))
	fs.String("database-url", "",
		"outbox database `url`: postgres://…, postgresql://…, mysql://… or sqlite:PATH"+
			" (default sqlite:<data-dir>/outbox.db)"+envHelp("database.url"))
	fs.StringArray(flagTable, []string{TableDefault},
		"outbox table `name`, optionally schema-qualified (schema.table), or a pattern with * ('tenant_*.outbox');"+
			" repeatable for several tables"+envHelp("database.table")+"; several: "+EnvName("database.tables")+", comma-separated")
	fs.String("source", SourceDefault,
		"what the relay reads: table (claims rows of the bridge table), postgres-wal (its inserts from PostgreSQL's write-ahead log),"+
			" mysql-binlog (its inserts from the binary log of MariaDB or MySQL) or watermill-forwarder (a Watermill forwarder topic)"+envHelp("source"))
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
		"create stream `NAME:SUBJ[,SUBJ][:rN]` when missing (duplicates 2m, file storage; N replicas, 1 to 5,"+
			" by default 3 on a cluster of three or more servers and 1 on a single server);"+
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

// ParseStreamFlag parses an --ensure-stream value "NAME:SUBJ[,SUBJ][:rN]" into a Stream
// with the stream defaults (duplicates 2m, file storage, replicas auto: 3 on a cluster
// of three or more servers, 1 otherwise); ":rN" asks for N replicas (1 to 5). It checks
// the shape only; Validate checks the name, subjects and replicas. The error is an *Error.
func ParseStreamFlag(s string) (Stream, error) {
	name, subjects, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	replicas := StreamReplicasDefault
	if head, tail, more := strings.Cut(subjects, ":"); more {
		n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(tail), "r"))
		if !strings.HasPrefix(strings.TrimSpace(tail), "r") || err != nil || n < 1 || n > StreamReplicasMax {
			return Stream{}, &Error{
				Key:     "--" + flagEnsureStream,
				Value:   s,
				Allowed: "must be NAME:SUBJECT[,SUBJECT…][:rN] with N replicas from 1 to 5, such as EVENTS:events.>:r3; give each stream its own --" + flagEnsureStream + " (a subject here may not contain ':')",
			}
		}
		subjects, replicas = head, n
	}
	var subs []string
	for sub := range strings.SplitSeq(subjects, ",") {
		if sub = strings.TrimSpace(sub); sub != "" {
			subs = append(subs, sub)
		}
	}
	if !ok || name == "" || len(subs) == 0 {
		return Stream{}, &Error{
			Key:     "--" + flagEnsureStream,
			Value:   s,
			Allowed: fmt.Sprintf("must be NAME:SUBJECT[,SUBJECT…][:rN] such as %s:%s or %s:%s:r3", EmbeddedStreamName, EmbeddedStreamSubject, EmbeddedStreamName, EmbeddedStreamSubject),
		}
	}
	return Stream{
		Name:       name,
		Subjects:   subs,
		Duplicates: StreamDuplicatesDefault,
		Replicas:   replicas,
		Storage:    StreamStorageDefault,
	}, nil
}
