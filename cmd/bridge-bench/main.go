// Command bridge-bench measures the relay against what JetStream itself
// accepts on the same machine, and against the way Watermill users relay an
// outbox today. One run prints one table (or JSON with --json):
//
//	limit     N messages published straight to a stream, asynchronously
//	bridge    N committed rows drained by the relay (first claim to last mark;
//	          with --source postgres-wal, first mark to last mark); with
//	          --relays 1,2,4, once per relay count, each on a fresh table
//	database  N committed rows drained by the relay's claims and marks
//	          alone (no NATS): the database server's CPU, WAL and HOT
//	          updates per row
//	latency   commit-to-PubAck time while a producer commits R rows/s for T
//	baseline  rows relayed by watermill-sql + Watermill's forwarder + a
//	          synchronous JetStream publisher
//	producers the service's commit rate (an order row and an outbox row per
//	          transaction) with the bridge's table against a minimal outbox
//	          table, 8 and 64 writers, interleaved runs; no relay
//	tables    the same rows in one table and spread over 100, one relay over
//	          them (database.tables), interleaved runs
//	idle      the database CPU an idle relay costs, over 60 s
//
// The relay runs in a child process (this binary, re-executed) so that its
// peak RSS is its own. See docs/BENCHMARKS.md for figures.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-bridge/bridge/internal/broker"
)

// settings are the knobs of one run, printed with the results.
type settings struct {
	DatabaseURL       string        `json:"-"`
	Database          string        `json:"database"`
	NATSURL           string        `json:"nats_url"`
	Cluster           bool          `json:"cluster"`
	Rows              int           `json:"rows"`
	PayloadBytes      int           `json:"payload_bytes"`
	BaselineRows      int           `json:"baseline_rows"`
	Rate              int           `json:"latency_rate_rows_per_s"`
	HighRate          int           `json:"latency_high_rate_rows_per_s"`
	HighRowsPerCommit int           `json:"latency_high_rows_per_commit"`
	Duration          time.Duration `json:"-"`
	DurationText      string        `json:"latency_duration"`
	BatchSize         int           `json:"batch_size"`
	MaxInFlight       int           `json:"max_in_flight"`
	Phases            string        `json:"phases"`
	DeleteOnRelay     bool          `json:"delete_on_relay"`
	FillFactor        int           `json:"fillfactor,omitempty"`
	OrderingKeys      int           `json:"ordering_keys"`
	RowsPerCommit     int           `json:"rows_per_commit,omitempty"`
	Source            string        `json:"source"`
	// Relays is the relay count of the top-level bridge figures: the
	// first of RelayCounts, the counts of --relays, one bridge phase each.
	Relays           int               `json:"relays"`
	RelayCounts      []int             `json:"relay_counts"`
	ProducerWriters  []int             `json:"producer_writers,omitempty"`
	ProducerVariants []producerVariant `json:"producer_variants,omitempty"`
	ProducerRounds   int               `json:"producer_rounds,omitempty"`
	ProducerDuration time.Duration     `json:"-"`
	IdleDuration     time.Duration     `json:"-"`
	TablesCount      int               `json:"tables_count,omitempty"`
	TablesRounds     int               `json:"tables_rounds,omitempty"`
	CPUProfile       string            `json:"-"`
	MemProfile       string            `json:"-"`
}

// results is what the JSON output holds; keys are fixed by the issue.
type results struct {
	LimitMsgsPerS float64 `json:"limit_msgs_per_s"`
	// With an external nats-server (--nats-url), the limit phase's CPU per
	// message of this process, a bare nats.go async publisher (the floor of
	// any relay on nats.go), and of the nats-server processes, and their
	// ratio; absent with the in-process server.
	LimitPublisherCPUUsPerMsg float64 `json:"limit_publisher_cpu_us_per_msg,omitempty"`
	LimitNATSCPUUsPerMsg      float64 `json:"limit_nats_cpu_us_per_msg,omitempty"`
	RatioPublisherNATSCPU     float64 `json:"ratio_publisher_nats_cpu,omitempty"`
	BridgeRowsPerS            float64 `json:"bridge_rows_per_s"`
	BaselineRowsPerS          float64 `json:"baseline_rows_per_s"`
	RatioBridgeLimit          float64 `json:"ratio_bridge_limit"`
	RatioBridgeBaseline       float64 `json:"ratio_bridge_baseline"`
	LatencyP50Ms              float64 `json:"latency_p50_ms"`
	LatencyP90Ms              float64 `json:"latency_p90_ms"`
	LatencyP99Ms              float64 `json:"latency_p99_ms"`
	LatencyMaxMs              float64 `json:"latency_max_ms"`
	// The latency phase's rows committed from its second second on (the
	// relay's polls follow the rows), and its first row, committed after
	// a second without rows (an idle relay's wake-up); see latencyRun.
	LatencySteadyP50Ms     float64 `json:"latency_steady_p50_ms,omitempty"`
	LatencySteadyP99Ms     float64 `json:"latency_steady_p99_ms,omitempty"`
	LatencyFirstMs         float64 `json:"latency_first_ms,omitempty"`
	LatencyHighP50Ms       float64 `json:"latency_high_p50_ms,omitempty"`
	LatencyHighP90Ms       float64 `json:"latency_high_p90_ms,omitempty"`
	LatencyHighP99Ms       float64 `json:"latency_high_p99_ms,omitempty"`
	LatencyHighMaxMs       float64 `json:"latency_high_max_ms,omitempty"`
	LatencyHighSteadyP50Ms float64 `json:"latency_high_steady_p50_ms,omitempty"`
	LatencyHighSteadyP99Ms float64 `json:"latency_high_steady_p99_ms,omitempty"`
	LatencyHighFirstMs     float64 `json:"latency_high_first_ms,omitempty"`
	PeakRSSMiB             float64 `json:"peak_rss_mib"`
	// CPU time (user+system) per relayed row over the bridge phase: of the
	// relay processes; of the database server's processes when it runs on
	// this machine (absent otherwise; SQLite runs inside the relay); of
	// NATS: this process when the nats-server runs in it (it also polls
	// the table once a second), else the local processes named nats-server.
	RelayCPUUsPerRow    float64  `json:"relay_cpu_us_per_row"`
	DatabaseCPUUsPerRow *float64 `json:"database_cpu_us_per_row,omitempty"`
	NATSCPUUsPerRow     float64  `json:"nats_cpu_us_per_row"`
	// The bridge phase once per --relays count, in the order given, each
	// on a fresh table of the same rows; the figures above are the first
	// entry's. Scaling is each entry's rows/s over the entry of
	// BridgeScalingBaseRelays relays (the first with one relay, else the
	// first entry).
	BridgeRuns              []bridgeRun `json:"bridge_runs,omitempty"`
	BridgeScalingBaseRelays int         `json:"bridge_scaling_base_relays,omitempty"`
	// The database phase (absent when it did not run): rows per second
	// of the drain; per row, the CPU time (user+system) of the server
	// task that served it (absent when not on this machine, and on
	// SQLite), with its time on CPU in each kind of statement; the CPU
	// time of this process (the Store and driver; SQLite's engine too);
	// the write-ahead log (PostgreSQL) or InnoDB redo log (MySQL,
	// MariaDB) the whole server wrote; the share of the table's updates
	// that were HOT, in per cent, and the checkpoints counted during the
	// drain (PostgreSQL).
	DatabasePhaseRowsPerS          float64  `json:"database_phase_rows_per_s,omitempty"`
	DatabasePhaseCPUUsPerRow       *float64 `json:"database_phase_cpu_us_per_row,omitempty"`
	DatabasePhaseRequeueUsPerRow   *float64 `json:"database_phase_requeue_us_per_row,omitempty"`
	DatabasePhaseClaimUsPerRow     *float64 `json:"database_phase_claim_us_per_row,omitempty"`
	DatabasePhaseMarkUsPerRow      *float64 `json:"database_phase_mark_us_per_row,omitempty"`
	DatabasePhaseClientCPUUsPerRow *float64 `json:"database_phase_client_cpu_us_per_row,omitempty"`
	DatabasePhaseWALBytesPerRow    *float64 `json:"database_phase_wal_bytes_per_row,omitempty"`
	DatabasePhaseHOTUpdatePct      *float64 `json:"database_phase_hot_update_pct,omitempty"`
	DatabasePhaseCheckpoints       *int64   `json:"database_phase_checkpoints,omitempty"`
	// The producers phase (absent when it did not run): every run, and per
	// variant and writer count the median and its ratio to the minimal
	// table's.
	ProducerRuns []producerRun     `json:"producer_runs,omitempty"`
	Producers    []producerSummary `json:"producers,omitempty"`
	// The tables phase (absent when it did not run).
	Tables *tablesResult `json:"tables,omitempty"`
	// The idle phase (absent when it did not run).
	Idle     *idleResult `json:"idle,omitempty"`
	Settings settings    `json:"settings"`
	Versions versions    `json:"versions"`
	Date     string      `json:"date"`
	// databaseNotMeasured says why DatabasePhaseCPUUsPerRow is absent.
	databaseNotMeasured string
}

type versions struct {
	Go         string `json:"go"`
	NATSServer string `json:"nats_server"`
	Database   string `json:"database"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childCommand {
		os.Exit(runChild(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bridge-bench", flag.ContinueOnError)
	var s settings
	var asJSON bool
	fs.StringVar(&s.DatabaseURL, "database-url", os.Getenv("BRIDGE_TEST_POSTGRES_URL"),
		"outbox database: postgres://… (a schema bench_* is created and dropped), mysql://… (tables bench_* are created and dropped; no baseline phase) or sqlite:PATH; default $BRIDGE_TEST_POSTGRES_URL, else SQLite in a temp dir")
	fs.StringVar(&s.NATSURL, "nats-url", "", "NATS server with JetStream; default an in-process server storing in a temp dir")
	fs.IntVar(&s.Rows, "n", 100000, "rows for the limit, bridge and database phases")
	fs.IntVar(&s.PayloadBytes, "size", 256, "payload bytes per message")
	fs.IntVar(&s.BaselineRows, "baseline-n", 20000, "rows for the baseline phase (it is slow; the rate is per second either way)")
	fs.IntVar(&s.Rate, "rate", 1000, "rows per second committed during the latency phase")
	fs.IntVar(&s.HighRate, "high-rate", 10000, "rows per second committed during the latency-high phase (several producers)")
	fs.IntVar(&s.HighRowsPerCommit, "high-rows-per-commit", 10, "rows per transaction in the latency-high phase (a 2-core machine running the relay, NATS and PostgreSQL commits only ~1,600 single-row transactions per second)")
	fs.DurationVar(&s.Duration, "duration", 10*time.Second, "length of each latency phase")
	fs.BoolVar(&s.Cluster, "cluster", false, "run the in-process NATS as a 3-node JetStream cluster on loopback, with R3 streams (the production shape); not with --nats-url")
	relays := fs.String("relays", "1", "relays draining the bridge phase's table together, each a child process (scale-out); a comma-separated list of counts (e.g. 1,2,4) runs the bridge phase once per count, each on a fresh table of the same rows, in this run, and reports each against the others and the limit phase")
	fs.IntVar(&s.BatchSize, "batch-size", 500, "relay.batch_size of the relay")
	fs.IntVar(&s.MaxInFlight, "max-in-flight", 2000, "relay.max_in_flight of the relay")
	fs.StringVar(&s.Phases, "phases", "limit,bridge,latency,baseline", "comma-separated phases to run: limit, bridge, database, latency, latency-high, baseline, producers, tables, idle")
	writers := fs.String("producers-writers", "8,64", "comma-separated writer counts of the producers phase")
	variants := fs.String("producers-variants", "", "comma-separated table kinds of the producers phase, minimal among them: minimal (primary key and unique idempotency key), bridge (as bridge migrate makes it), bridge+notify (with the opt-in NOTIFY trigger; PostgreSQL), bridge-columns (the bridge's columns with the minimal table's indexes), bridge-no-claim-index (the bridge's table without the index its claim reads); default minimal,bridge and on PostgreSQL bridge+notify")
	fs.IntVar(&s.ProducerRounds, "producers-rounds", 3, "rounds of the producers phase (each round runs every table kind at every writer count, interleaved)")
	fs.DurationVar(&s.ProducerDuration, "producers-duration", 5*time.Second, "length of each run of the producers phase")
	fs.DurationVar(&s.IdleDuration, "idle-duration", 60*time.Second, "length of the idle phase's measurement")
	fs.IntVar(&s.TablesCount, "tables-count", 100, "tables of the tables phase's runs over many tables (the --n rows spread over them)")
	fs.IntVar(&s.TablesRounds, "tables-rounds", 2, "rounds of the tables phase (each round: one table, then --tables-count tables)")
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	fs.IntVar(&s.FillFactor, "fillfactor", 0, "PostgreSQL: ALTER TABLE … SET (fillfactor = N) on the bench's bridge tables before they are filled, 10 to 100 (room on each page for the claim's and the mark's new row versions; 0: the table as bridge migrate makes it); in the producers phase the minimal table keeps the default, so its ratios include the fillfactor's own cost")
	fs.BoolVar(&s.DeleteOnRelay, "delete-on-relay", false, "run the relay with relay.delete_on_relay: rows are deleted at their PubAck instead of marked done")
	fs.IntVar(&s.OrderingKeys, "ordering-keys", 0, "spread the rows of the bridge phase over this many ordering keys (row i gets key o-<i mod K>; 0: no ordering key)")
	fs.IntVar(&s.RowsPerCommit, "rows-per-commit", 0, "commit the bridge phase's rows in transactions of this many rows, by 4 writers, before the relay starts (1: a backlog as services write it, one row per transaction, which is what a log source reads transaction by transaction; 0: all in one statement per 100,000 rows, the fastest fill)")
	fs.StringVar(&s.Source, "source", "table", "the relay's source: table (claims), postgres-wal (the write-ahead log; needs PostgreSQL 14+ with wal_level = logical: a publication and a replication slot per phase are created and dropped) or mysql-binlog (the binary log; needs MariaDB or MySQL with log_bin, binlog_format = ROW: a position table per phase)")
	fs.StringVar(&s.CPUProfile, "cpuprofile", "", "write a CPU profile of the relay child process to this file, read with go tool pprof (each phase that runs the relay overwrites it: use with --phases bridge)")
	fs.StringVar(&s.MemProfile, "memprofile", "", "write the allocation profile of the relay child process, from its start to its end, to this file, read with go tool pprof -sample_index=alloc_space (or alloc_objects); as --cpuprofile, use with --phases bridge")
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if s.OrderingKeys < 0 {
		fmt.Fprintf(stderr, "bridge-bench: --ordering-keys %d: must be 0 (no ordering key) or more\n", s.OrderingKeys)
		return 2
	}
	if s.RowsPerCommit < 0 {
		fmt.Fprintf(stderr, "bridge-bench: --rows-per-commit %d: must be 0 (one statement per 100,000 rows) or more\n", s.RowsPerCommit)
		return 2
	}
	if s.Source != "table" && s.Source != "postgres-wal" && s.Source != "mysql-binlog" {
		fmt.Fprintf(stderr, "bridge-bench: --source %q: must be table, postgres-wal or mysql-binlog\n", s.Source)
		return 2
	}
	if s.Cluster && s.NATSURL != "" {
		fmt.Fprintln(stderr, "bridge-bench: --cluster starts its own 3-node cluster: leave out --nats-url")
		return 2
	}
	counts, err := parseRelayCounts(*relays)
	if err != nil {
		fmt.Fprintf(stderr, "bridge-bench: --relays %q: %v\n", *relays, err)
		return 2
	}
	s.RelayCounts, s.Relays = counts, counts[0]
	if s.HighRowsPerCommit < 1 {
		fmt.Fprintf(stderr, "bridge-bench: --high-rows-per-commit %d: must be 1 or more\n", s.HighRowsPerCommit)
		return 2
	}
	if s.Rate < 1 || s.HighRate < 1 {
		fmt.Fprintf(stderr, "bridge-bench: --rate %d, --high-rate %d: must be 1 or more\n", s.Rate, s.HighRate)
		return 2
	}
	for _, w := range strings.Split(*writers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "bridge-bench: --producers-writers %q: must be writer counts of 1 or more, comma-separated (e.g. 8,64)\n", *writers)
			return 2
		}
		s.ProducerWriters = append(s.ProducerWriters, n)
	}
	if s.FillFactor != 0 && (s.FillFactor < 10 || s.FillFactor > 100) {
		fmt.Fprintf(stderr, "bridge-bench: --fillfactor %d: must be 10 to 100 (PostgreSQL's range), or 0 for the table as migrate makes it\n", s.FillFactor)
		return 2
	}
	if s.FillFactor != 0 && !strings.HasPrefix(s.DatabaseURL, "postgres://") && !strings.HasPrefix(s.DatabaseURL, "postgresql://") {
		fmt.Fprintf(stderr, "bridge-bench: --fillfactor is PostgreSQL's: --database-url must be postgres://… (or $BRIDGE_TEST_POSTGRES_URL set)\n")
		return 2
	}
	if *variants != "" {
		v, err := parseProducerVariants(*variants)
		if err != nil {
			fmt.Fprintf(stderr, "bridge-bench: %v\n", err)
			return 2
		}
		s.ProducerVariants = v
	}
	if s.TablesCount < 2 || s.TablesRounds < 1 {
		fmt.Fprintf(stderr, "bridge-bench: --tables-count %d, --tables-rounds %d: need 2 or more tables and 1 or more rounds\n", s.TablesCount, s.TablesRounds)
		return 2
	}
	if s.ProducerRounds < 1 || s.ProducerDuration <= 0 || s.IdleDuration <= 0 {
		fmt.Fprintf(stderr, "bridge-bench: --producers-rounds %d, --producers-duration %s, --idle-duration %s: must be 1 or more, and positive durations\n", s.ProducerRounds, s.ProducerDuration, s.IdleDuration)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bridge-bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	s.DurationText = s.Duration.String()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := bench(ctx, s)
	if err != nil {
		fmt.Fprintln(stderr, "bridge-bench:", err)
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
		return 0
	}
	printTable(stdout, res)
	return 0
}

// parseRelayCounts reads --relays: one relay count, or several
// comma-separated (spaces around them allowed), each 1 or more; a count may
// repeat.
func parseRelayCounts(text string) ([]int, error) {
	var counts []int
	for i, f := range strings.Split(text, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			what := fmt.Sprintf("%q is not a relay count", f)
			if f == "" {
				what = fmt.Sprintf("item %d is empty", i+1)
			}
			return nil, fmt.Errorf("%s: give a relay count of 1 or more, or several comma-separated (e.g. 4, or 1,2,4 to run the bridge phase once per count)", what)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// progress writes a line to stderr, so that long runs show they move.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// serverLog takes the in-process nats-servers' warnings and errors to
// stderr: a stream the server cannot create is a bare "error creating store
// for stream" (10049) to the bench, with the cause in the server's log.
var serverLog = broker.ServerLog(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// printSteady prints a latency phase's second line: see latencyRun.
func printSteady(w io.Writer, p50, p99, first float64) {
	fmt.Fprintf(w, "%-10s after its first %s: p50 %.2f ms, p99 %.2f ms; its first row, after %s without rows: %.2f ms\n", "",
		latencySettle, p50, p99, latencyQuiet, first)
}

func printTable(w io.Writer, r *results) {
	s := r.Settings
	fmt.Fprintf(w, "bridge-bench %s — %s, nats-server %s, %s\n", r.Date, r.Versions.Go, r.Versions.NATSServer, r.Versions.Database)
	mode := ", source " + s.Source
	if s.DeleteOnRelay {
		mode = ", delete_on_relay"
	}
	if s.OrderingKeys > 0 {
		mode += fmt.Sprintf(", %d ordering keys", s.OrderingKeys)
	}
	if s.FillFactor > 0 {
		mode += fmt.Sprintf(", fillfactor %d", s.FillFactor)
	}
	if s.RowsPerCommit > 0 {
		mode += fmt.Sprintf(", bridge rows committed %d per transaction", s.RowsPerCommit)
	}
	if s.Cluster {
		mode += ", 3-node cluster, R3 streams"
	}
	multi := len(r.BridgeRuns) > 1
	switch {
	case len(s.RelayCounts) > 1:
		mode += ", relays " + joinInts(s.RelayCounts) + " (a bridge phase each)"
	case s.Relays > 1:
		mode += fmt.Sprintf(", %d relays", s.Relays)
	}
	fmt.Fprintf(w, "settings: %d rows of %d B, batch_size %d, max_in_flight %d%s, latency %d rows/s for %s, baseline %d rows\n\n",
		s.Rows, s.PayloadBytes, s.BatchSize, s.MaxInFlight, mode, s.Rate, s.DurationText, s.BaselineRows)
	fmt.Fprintf(w, "%-10s %s\n", "phase", "result")
	if r.LimitMsgsPerS > 0 {
		fmt.Fprintf(w, "%-10s %10.0f msg/s   JetStream async publish, distinct Nats-Msg-Id\n", "limit", r.LimitMsgsPerS)
		if r.LimitNATSCPUUsPerMsg > 0 {
			fmt.Fprintf(w, "%-10s CPU per message: publisher (nats.go) %.1f µs, nats-server %.1f µs (%.2f×)\n",
				"", r.LimitPublisherCPUUsPerMsg, r.LimitNATSCPUUsPerMsg, r.RatioPublisherNATSCPU)
		}
	}
	if r.BridgeRowsPerS > 0 {
		span := "first claim to last mark"
		if logSource(s.Source) {
			span = "first mark to last mark"
		}
		if s.DeleteOnRelay {
			span = "relay start to empty table"
		}
		if !multi {
			fmt.Fprintf(w, "%-10s %10.0f rows/s  %s\n", "bridge", r.BridgeRowsPerS, span)
		}
		for _, b := range r.BridgeRuns {
			if multi {
				fmt.Fprintf(w, "%-10s %10.0f rows/s  %s, %d relay(s)\n", "bridge", b.RowsPerS, span, b.Relays)
			}
		}
	}
	if r.DatabasePhaseRowsPerS > 0 {
		fmt.Fprintf(w, "%-10s %10.0f rows/s  the relay's requeue, claim and mark alone, one session, no NATS\n", "database", r.DatabasePhaseRowsPerS)
	}
	if r.BaselineRowsPerS > 0 {
		fmt.Fprintf(w, "%-10s %10.0f rows/s  watermill-sql + forwarder + sync JetStream publish\n", "baseline", r.BaselineRowsPerS)
	}
	if r.LatencyMaxMs > 0 {
		fmt.Fprintf(w, "%-10s p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms (commit to PubAck, %d rows/s)\n", "latency",
			r.LatencyP50Ms, r.LatencyP90Ms, r.LatencyP99Ms, r.LatencyMaxMs, s.Rate)
		printSteady(w, r.LatencySteadyP50Ms, r.LatencySteadyP99Ms, r.LatencyFirstMs)
	}
	if r.LatencyHighMaxMs > 0 {
		fmt.Fprintf(w, "%-10s p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms (commit to PubAck, %d rows/s)\n", "lat-high",
			r.LatencyHighP50Ms, r.LatencyHighP90Ms, r.LatencyHighP99Ms, r.LatencyHighMaxMs, s.HighRate)
		printSteady(w, r.LatencyHighSteadyP50Ms, r.LatencyHighSteadyP99Ms, r.LatencyHighFirstMs)
	}
	fmt.Fprintln(w)
	if r.RatioBridgeLimit > 0 && !multi {
		fmt.Fprintf(w, "bridge/limit     %.2f\n", r.RatioBridgeLimit)
	}
	if r.RatioBridgeBaseline > 0 {
		fmt.Fprintf(w, "bridge/baseline  %.1f\n", r.RatioBridgeBaseline)
	}
	if r.PeakRSSMiB > 0 && !multi {
		fmt.Fprintf(w, "peak RSS of the relay  %.1f MiB\n", r.PeakRSSMiB)
	}
	if multi {
		printBridgeRuns(w, r)
	} else if r.BridgeRowsPerS > 0 {
		db := "not measured (not local)"
		if r.DatabaseCPUUsPerRow != nil {
			db = fmt.Sprintf("%.1f µs", *r.DatabaseCPUUsPerRow)
		}
		fmt.Fprintf(w, "CPU per row (bridge phase): relay %.1f µs, database %s, NATS %.1f µs\n", r.RelayCPUUsPerRow, db, r.NATSCPUUsPerRow)
	}
	if r.DatabasePhaseRowsPerS > 0 {
		fmt.Fprintf(w, "per row (database phase): %s\n", r.databasePhaseText())
	}
	if len(r.Producers) > 0 {
		fmt.Fprintf(w, "\nproducers (an order row + an outbox row per transaction, %d rounds of %s, interleaved):\n", s.ProducerRounds, s.ProducerDuration)
		for _, p := range r.Producers {
			fmt.Fprintf(w, "  %2d writers  %-21s median %7.0f tps  %.2f× minimal (rounds %.2f–%.2f)  runs %v\n",
				p.Writers, p.Variant, p.MedianTPS, p.RatioToMinimal, p.RoundRatioRange[0], p.RoundRatioRange[1], roundAll(p.TPS))
		}
	}
	if r.Tables != nil {
		fmt.Fprintf(w, "\ntables (the same rows in 1 table and in %d, one relay, %d rounds interleaved): %.2f× (medians)\n", s.TablesCount, s.TablesRounds, r.Tables.Ratio)
		for _, t := range r.Tables.Runs {
			db := "not measured"
			if t.DatabaseCPUUsPerRow != nil {
				db = fmt.Sprintf("%.1f µs", *t.DatabaseCPUUsPerRow)
			}
			fmt.Fprintf(w, "  %3d table(s) %8.0f rows/s  CPU per row: relay %.1f µs, database %s, NATS %.1f µs\n", t.Tables, t.RowsPerS, t.RelayCPUUsPerRow, db, t.NATSCPUUsPerRow)
		}
	}
	if r.Idle != nil {
		server := "not measured (processes of the server ended meanwhile)"
		if r.Idle.ServerPctOfCore != nil {
			server = fmt.Sprintf("%.2f %% (others' work included)", *r.Idle.ServerPctOfCore)
		}
		fmt.Fprintf(w, "\nidle relay: its database sessions %.3f %% of a core over %.0f s (%d sessions); whole server %s\n",
			r.Idle.SessionsPctOfCore, r.Idle.Seconds, r.Idle.Sessions, server)
	}
}

// printBridgeRuns prints one line per bridge phase of a --relays list.
func printBridgeRuns(w io.Writer, r *results) {
	fmt.Fprintf(w, "bridge phase per relay count, each on a fresh table of %d rows, in this run; CPU per row in µs;\n", r.Settings.Rows)
	fmt.Fprintf(w, "shares of the machine's cores over each phase; ratios: to the limit phase above, to %d relay(s), relay CPU to NATS CPU\n", r.BridgeScalingBaseRelays)
	fmt.Fprintf(w, "%6s %9s %6s %7s %7s %7s %7s %10s %9s  %s\n",
		"relays", "rows/s", "/limit", "scaling", "relay", "NATS", "db", "relay/NATS", "peak RSS", "machine busy: all, relay, NATS, db")
	for _, b := range r.BridgeRuns {
		ratio, db, busy := "-", "-", "not read"
		if b.RatioLimit > 0 {
			ratio = fmt.Sprintf("%.2f", b.RatioLimit)
		}
		if b.DatabaseCPUUsPerRow != nil {
			db = fmt.Sprintf("%.1f", *b.DatabaseCPUUsPerRow)
		}
		if b.Cores > 0 {
			dbPct := "-"
			if b.DatabasePctOfMachine != nil {
				dbPct = fmt.Sprintf("%.0f %%", *b.DatabasePctOfMachine)
			}
			busy = fmt.Sprintf("%.0f %%, %.0f %%, %.0f %%, %s of %d cores", b.MachineBusyPct, b.RelayPctOfMachine, b.NATSPctOfMachine, dbPct, b.Cores)
		}
		if b.Checkpoints != nil && *b.Checkpoints > 0 {
			busy += fmt.Sprintf("; %d checkpoint(s) during the drain", *b.Checkpoints)
		}
		fmt.Fprintf(w, "%6d %9.0f %6s %7.2f %7.1f %7.1f %7s %10.2f %5.1f MiB  %s\n",
			b.Relays, b.RowsPerS, ratio, b.Scaling, b.RelayCPUUsPerRow, b.NATSCPUUsPerRow, db, b.RatioRelayNATSCPU, b.PeakRSSMiB, busy)
	}
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}

func roundAll(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x + 0.5)
	}
	return out
}
