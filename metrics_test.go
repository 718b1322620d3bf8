package bridge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// relayMetrics returns the metric families of the relay: those its
// /metrics serves once it has relayed a row (the relay as wire builds it,
// on SQLite and an in-process NATS server), and every bridge_* name the
// source gives to Prometheus (string literals in the files that use
// client_golang), which adds the vectors not yet observed and the
// watermill-forwarder relay's metrics. Both come from the code, so a
// metric added anywhere shows up here. The values are the family types
// ("counter", "gauge", "histogram", "" when only found in the source).
func relayMetrics(t *testing.T) map[string]string {
	t.Helper()
	metrics := scrapeRelay(t)
	for _, name := range sourceMetricNames(t) {
		if _, ok := metrics[name]; !ok {
			metrics[name] = ""
		}
	}
	return metrics
}

// scrapeRelay runs the relay, relays one row, and reads the # TYPE lines of
// its /metrics.
func scrapeRelay(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	url := bridgetest.SQLiteURL(t)
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = outbox.Migrate(ctx, db, "outbox")
	require.NoError(t, err)
	store, err := outbox.NewStore(db, "outbox")
	require.NoError(t, err)

	n := bridgetest.StartNATS(t)
	cfg := config.Default()
	cfg.Database.URL = url
	cfg.NATS.URL = n.URL()
	cfg.Streams = []config.Stream{{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: time.Minute, Replicas: 1, Storage: "file"}}
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Relay.PollInterval = 20 * time.Millisecond
	require.NoError(t, cfg.Validate())
	relay, cleanup := newRelay(t, &cfg)
	moved := source.NewTestSignal[int]()
	bridge.Moved(relay, moved)
	runCtx, stop := context.WithCancel(ctx)
	done, served := make(chan error, 1), make(chan error, 1)
	go func() { served <- relay.Health.Serve(runCtx) }()
	go func() { done <- relay.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
		require.NoError(t, <-served)
		cleanup()
	})

	_, err = store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "metrics-1", Subject: "events.metrics", Payload: []byte("x")})
	require.NoError(t, err)
	moved.WaitUntilWithin(t, time.Minute, func() bool {
		st, found, err := store.StatusOf(ctx, 1)
		return err == nil && found && st == outbox.StatusDone
	}, "the row relayed")

	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + relay.Health.Addr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	metrics := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			metrics[f[2]] = f[3]
		}
	}
	require.NoError(t, sc.Err())
	return metrics
}

var metricName = regexp.MustCompile(`^bridge_[a-z][a-z0-9_]*$`)

// sourceMetricNames lists the string literals of the relay module's
// non-test Go files that import client_golang and look like bridge_*
// metric names.
func sourceMetricNames(t *testing.T) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Other modules (producer, consumer, examples) and the bench.
			if path != "." && (fileExists(filepath.Join(path, "go.mod")) || path == "cmd/bridge-bench" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(f.Imports, func(s *ast.ImportSpec) bool {
			return strings.HasPrefix(s.Path.Value, `"github.com/prometheus/client_golang/`)
		}) {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if field, ok := n.(*ast.Field); ok && field.Tag != nil {
				field.Tag = nil // struct tags are not metric names
			}
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && metricName.MatchString(s) {
					names = append(names, s)
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	slices.Sort(names)
	return slices.Compact(names)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestOperationsDocumentsEveryMetric checks that docs/OPERATIONS.md names
// every metric the relay registers (go_* and process_* as families).
func TestOperationsDocumentsEveryMetric(t *testing.T) {
	t.Parallel()
	metrics := relayMetrics(t)
	require.Contains(t, metrics, "bridge_rows_relayed_total")
	require.Contains(t, metrics, "bridge_watermill_messages_relayed_total", "found in the source")
	doc, err := os.ReadFile("docs/OPERATIONS.md")
	require.NoError(t, err)
	for name := range metrics {
		switch {
		case strings.HasPrefix(name, "go_"):
			name = "go_*"
		case strings.HasPrefix(name, "process_"):
			name = "process_*"
		}
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/OPERATIONS.md does not document the metric %s", name)
		}
	}
}

// monitoredMetric finds the metric names in PromQL: the relay's families
// (bridge_*, watermill_*, go_*, process_*) and Prometheus' own up.
var monitoredMetric = regexp.MustCompile(`\b(?:(?:bridge|watermill|go|process)_[a-zA-Z0-9_]+|up\{)`)

// TestMonitoringQueriesExistingMetrics checks deployments/monitoring: the
// dashboard's JSON parses, every metric that a panel, a dashboard variable
// or an alert rule queries is one the relay registers (a histogram's
// _bucket, _sum and _count included), so that no panel stays empty and no
// alert waits on a metric that does not exist, and every metric an alert
// uses has a panel.
func TestMonitoringQueriesExistingMetrics(t *testing.T) {
	t.Parallel()
	metrics := relayMetrics(t)

	var queries []string
	data, err := os.ReadFile("deployments/monitoring/grafana-dashboard.json")
	require.NoError(t, err)
	var dashboard map[string]any
	require.NoError(t, json.Unmarshal(data, &dashboard), "grafana-dashboard.json does not parse")
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(e, k)
			}
		case []any:
			for _, e := range v {
				walk(e, key)
			}
		case string:
			if key == "expr" || key == "definition" || key == "query" {
				queries = append(queries, v)
			}
		}
	}
	walk(dashboard, "")
	panelQueries := len(queries)
	require.Greater(t, panelQueries, 10, "the dashboard has hardly any query")

	data, err = os.ReadFile("deployments/monitoring/alerts.yaml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(data, &rules))
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			queries = append(queries, r.Expr)
		}
	}
	require.Greater(t, len(queries), panelQueries, "alerts.yaml has no rule")

	// Every metric an alert waits on has a panel: an operator paged by an
	// alert finds its series on the dashboard.
	onDashboard := make(map[string]bool)
	for _, q := range queries[:panelQueries] {
		for _, name := range monitoredMetric.FindAllString(q, -1) {
			onDashboard[name] = true
		}
	}
	for _, q := range queries[panelQueries:] {
		for _, name := range monitoredMetric.FindAllString(q, -1) {
			if name != "up{" && !onDashboard[name] {
				t.Errorf("the alert expression %q uses %s, which no dashboard panel shows", q, name)
			}
		}
	}

	for _, q := range queries {
		names := monitoredMetric.FindAllString(q, -1)
		if len(names) == 0 && strings.Contains(q, "(") {
			t.Errorf("query %q names no metric of the relay", q)
		}
		for _, name := range names {
			if name == "up{" {
				continue // Prometheus' own: the scrape of the target
			}
			if _, ok := metrics[name]; ok {
				continue
			}
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suffix)
			}
			if metrics[base] == "histogram" {
				continue
			}
			t.Errorf("query %q uses %s, which the relay does not export", q, name)
		}
	}
}
