package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// TestMain lets the test binary play the relay: the bridge phase starts
// its relays as this binary re-executed with childCommand.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == childCommand {
		os.Exit(runChild(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// runBench runs the command line and returns its exit status and output.
func runBench(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRelaysFlagRefusesBadCounts(t *testing.T) {
	for _, v := range []string{"0", "1,,2", "x", "", "1,", "2,-1", "1.5", "1;2"} {
		t.Run(v, func(t *testing.T) {
			// --phases limit: nothing would run long if the flag were
			// accepted; the check comes before any server is started.
			code, _, stderr := runBench(t, "--relays", v, "--phases", "limit", "-n", "1", "--database-url", "sqlite:"+filepath.Join(t.TempDir(), "x.db"))
			assert.Equal(t, 2, code, stderr)
			assert.Contains(t, stderr, "--relays")
			assert.Contains(t, stderr, "a relay count of 1 or more, or several comma-separated (e.g. 4, or 1,2,4")
		})
	}
	_, _, stderr := runBench(t, "--relays", "1,,2")
	assert.Contains(t, stderr, "item 2 is empty")
	_, _, stderr = runBench(t, "--relays", "x")
	assert.Contains(t, stderr, `"x" is not a relay count`)
}

func TestParseRelayCounts(t *testing.T) {
	for text, want := range map[string][]int{"4": {4}, "1,2,4": {1, 2, 4}, " 1, 2 ,4 ": {1, 2, 4}, "2,1,2": {2, 1, 2}} {
		got, err := parseRelayCounts(text)
		require.NoError(t, err, text)
		assert.Equal(t, want, got, text)
	}
}

// benchJSON is what the tests read of --json.
type benchJSON struct {
	LimitMsgsPerS           float64     `json:"limit_msgs_per_s"`
	BridgeRowsPerS          float64     `json:"bridge_rows_per_s"`
	RatioBridgeLimit        float64     `json:"ratio_bridge_limit"`
	RelayCPUUsPerRow        float64     `json:"relay_cpu_us_per_row"`
	PeakRSSMiB              float64     `json:"peak_rss_mib"`
	BridgeRuns              []bridgeRun `json:"bridge_runs"`
	BridgeScalingBaseRelays int         `json:"bridge_scaling_base_relays"`
	Settings                struct {
		Relays      int   `json:"relays"`
		RelayCounts []int `json:"relay_counts"`
	} `json:"settings"`
}

func benchRelays(t *testing.T, dbURL, relays string) benchJSON {
	t.Helper()
	code, stdout, stderr := runBench(t, "--database-url", dbURL, "-n", "200", "--relays", relays, "--phases", "limit,bridge", "--json")
	require.Equal(t, 0, code, stderr)
	var r benchJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &r), stdout)
	return r
}

// TestBridgeOncePerRelayCount: --relays 2,1 runs the bridge phase twice in
// one run, each on a fresh table of the same rows (the phase fails unless
// the run's stream holds exactly those rows), and reports each against the
// run with one relay and the limit phase; the top-level figures are the
// first run's.
func TestBridgeOncePerRelayCount(t *testing.T) {
	check := func(t *testing.T, dbURL string) benchJSON {
		r := benchRelays(t, dbURL, "2,1")
		require.Len(t, r.BridgeRuns, 2)
		assert.Equal(t, []int{2, 1}, r.Settings.RelayCounts)
		assert.Equal(t, 2, r.Settings.Relays, "settings.relays is the count of the top-level figures")
		assert.Equal(t, 1, r.BridgeScalingBaseRelays)
		require.Positive(t, r.LimitMsgsPerS)
		for i, want := range []int{2, 1} {
			b := r.BridgeRuns[i]
			assert.Equal(t, want, b.Relays)
			assert.Positive(t, b.RowsPerS)
			assert.InDelta(t, b.RowsPerS/r.LimitMsgsPerS, b.RatioLimit, 1e-9)
			assert.InDelta(t, b.RowsPerS/r.BridgeRuns[1].RowsPerS, b.Scaling, 1e-9)
			assert.Positive(t, b.PeakRSSMiB)
			assert.GreaterOrEqual(t, b.RelayCPUUsPerRow, 0.0)
		}
		assert.Equal(t, r.BridgeRuns[0].RowsPerS, r.BridgeRowsPerS)
		assert.InDelta(t, r.BridgeRowsPerS/r.LimitMsgsPerS, r.RatioBridgeLimit, 1e-9)
		assert.Equal(t, r.BridgeRuns[0].PeakRSSMiB, r.PeakRSSMiB)
		return r
	}
	t.Run("sqlite", func(t *testing.T) {
		check(t, "sqlite:"+filepath.Join(t.TempDir(), "outbox.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		r := check(t, bridgetest.PostgresURL(t))
		if localServerCommands(bridgetest.PostgresURL(t)) != nil {
			for _, b := range r.BridgeRuns {
				assert.NotNil(t, b.DatabaseCPUUsPerRow)
				assert.NotNil(t, b.Checkpoints)
			}
		}
	})
	t.Run("text", func(t *testing.T) {
		code, stdout, stderr := runBench(t, "--database-url", "sqlite:"+filepath.Join(t.TempDir(), "outbox.db"),
			"-n", "200", "--relays", "1,2", "--phases", "limit,bridge")
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, stdout, "relays 1,2 (a bridge phase each)")
		assert.Contains(t, stdout, "first claim to last mark, 1 relay(s)")
		assert.Contains(t, stdout, "first claim to last mark, 2 relay(s)")
		assert.NotContains(t, stdout, "bridge/limit", "one figure per relay count, not the first run's alone")
		var lines []string
		for _, l := range strings.Split(stdout, "\n") {
			if f := strings.Fields(l); len(f) > 3 && (f[0] == "1" || f[0] == "2") {
				lines = append(lines, l)
			}
		}
		require.Len(t, lines, 2, stdout)
		assert.Equal(t, "1.00", strings.Fields(lines[0])[3], "scaling of the run with one relay")
	})
	t.Run("one count", func(t *testing.T) {
		r := benchRelays(t, "sqlite:"+filepath.Join(t.TempDir(), "outbox.db"), "1")
		require.Len(t, r.BridgeRuns, 1)
		assert.Equal(t, 1, r.Settings.Relays)
		assert.Positive(t, r.BridgeRowsPerS)
		assert.Positive(t, r.RatioBridgeLimit)
		assert.Equal(t, 1.0, r.BridgeRuns[0].Scaling)
	})
}

// TestCPUOfCommandsKeepsEndedChildren: a child process that ended and was
// waited for still counts in its parent's figure, as a PostgreSQL backend
// that ends during a phase counts in the postmaster's.
func TestCPUOfCommandsKeepsEndedChildren(t *testing.T) {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	comm := strings.TrimSpace(string(b))
	before := cpuOfCommands(comm)
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	require.NoError(t, child.Run())
	spent := child.ProcessState.UserTime() + child.ProcessState.SystemTime()
	require.Greater(t, spent, 50*time.Millisecond, "the child burnt enough CPU to be seen in ticks of 10 ms")
	// Other processes with this name (another test binary) only add.
	assert.GreaterOrEqual(t, cpuOfCommands(comm)-before, spent-20*time.Millisecond)
}

// TestTablesPhase: --phases tables relays the same rows from one table and
// from several, one relay over their pattern, and reports each run and the
// ratio. A run fails unless the stream holds every row (the tables' keys
// once collided in the stream's duplicate window: one table's worth
// arrived, and the phase waited forever).
func TestTablesPhase(t *testing.T) {
	for kind, url := range map[string]string{"postgres": bridgetest.PostgresURL(t), "mysql": bridgetest.MySQLURL(t)} {
		t.Run(kind, func(t *testing.T) {
			code, stdout, stderr := runBench(t, "--database-url", url, "-n", "300", "--phases", "tables", "--tables-count", "3", "--tables-rounds", "1", "--json")
			require.Equal(t, 0, code, stderr)
			var r struct {
				Tables tablesResult `json:"tables"`
			}
			require.NoError(t, json.Unmarshal([]byte(stdout), &r), stdout)
			require.Len(t, r.Tables.Runs, 2)
			assert.Equal(t, 1, r.Tables.Runs[0].Tables)
			assert.Equal(t, 3, r.Tables.Runs[1].Tables)
			for _, run := range r.Tables.Runs {
				assert.Positive(t, run.RowsPerS)
			}
			assert.InDelta(t, r.Tables.Runs[1].RowsPerS/r.Tables.Runs[0].RowsPerS, r.Tables.Ratio, 1e-9)
		})
	}
}

// The producers phase runs every table kind asked for, each against the
// minimal table; the experiments' tables lose the indexes they are named
// for (dropIndexes fails when it finds none to drop).
func TestProducersPhaseVariants(t *testing.T) {
	all := "minimal,bridge,bridge-columns,bridge-no-claim-index"
	for kind, url := range map[string]string{"postgres": bridgetest.PostgresURL(t), "mysql": bridgetest.MySQLURL(t)} {
		t.Run(kind, func(t *testing.T) {
			code, stdout, stderr := runBench(t, "--database-url", url, "--phases", "producers", "--producers-writers", "2",
				"--producers-rounds", "1", "--producers-duration", "300ms", "--producers-variants", all, "--json")
			require.Equal(t, 0, code, stderr)
			var r struct {
				Producers []producerSummary `json:"producers"`
			}
			require.NoError(t, json.Unmarshal([]byte(stdout), &r), stdout)
			var got []string
			for _, s := range r.Producers {
				got = append(got, s.Variant)
				assert.Positive(t, s.MedianTPS, s.Variant)
				assert.Positive(t, s.RatioToMinimal, s.Variant)
			}
			assert.Equal(t, strings.Split(all, ","), got)
		})
	}
	code, _, stderr := runBench(t, "--phases", "producers", "--producers-variants", "bridge,bridge-columns")
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "must include minimal")
	code, _, stderr = runBench(t, "--phases", "producers", "--producers-variants", "minimal,narrow")
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, `unknown table kind "narrow"; accepted: minimal, bridge, bridge+notify, bridge-columns, bridge-no-claim-index`)
	code, _, stderr = runBench(t, "--database-url", bridgetest.MySQLURL(t), "--phases", "producers", "--producers-variants", "minimal,bridge+notify")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "bridge+notify table is PostgreSQL's only")
}
