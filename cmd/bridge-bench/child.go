package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/daemon"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// childCommand is the hidden first argument that makes this binary run the
// relay, as `bridge run` would, until SIGTERM; it then prints its peak RSS.
const childCommand = "__relay"

type childReport struct {
	PeakRSSKiB int64  `json:"peak_rss_kib"`
	Error      string `json:"error,omitempty"`
}

func runChild(args []string) int {
	fs := flag.NewFlagSet(childCommand, flag.ContinueOnError)
	dbURL := fs.String("database-url", "", "")
	table := fs.String("table", "", "")
	natsURL := fs.String("nats-url", "", "")
	batch := fs.Int("batch-size", 500, "")
	inflight := fs.Int("max-in-flight", 2000, "")
	cpuprofile := fs.String("cpuprofile", "", "")
	memprofile := fs.String("memprofile", "", "")
	deleteOnRelay := fs.Bool("delete-on-relay", false, "")
	source := fs.String("source", config.SourceTable, "")
	hold := fs.Bool("hold", false, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bridge-bench: --cpuprofile: %v\n", err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	if *memprofile != "" {
		defer writeAllocs(*memprofile)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go daemon.TuneGC(ctx, daemon.GCHeadroomDefault, quietLogger()) // as bridge run does

	cfg := config.Default()
	cfg.Database.URL, cfg.Database.Table, cfg.NATS.URL = *dbURL, *table, *natsURL
	if outbox.IsTablePattern(*table) { // the tables phase: one relay over many tables
		cfg.Database.Table, cfg.Database.Tables = config.TableDefault, []string{*table}
	}
	cfg.Relay.BatchSize, cfg.Relay.MaxInFlight = *batch, *inflight
	cfg.Relay.DeleteOnRelay = *deleteOnRelay
	cfg.Source = *source
	if cfg.Source == config.SourcePostgresWAL {
		n := walNames(*table)
		cfg.WAL.Slot, cfg.WAL.Publication = n.Slot, n.Publication
	}
	cfg.HTTP.Listen = "127.0.0.1:0"
	report := childReport{}
	if err := cfg.Validate(); err != nil {
		report.Error = err.Error()
	} else if hs, err := health.Listen(cfg.HTTP.Listen, quietLogger()); err != nil {
		report.Error = err.Error()
	} else if relay, cleanup, err := bridge.NewDaemon(ctx, &cfg, quietLogger(), hs); err != nil {
		report.Error = err.Error()
	} else {
		fmt.Println("ready")
		if *hold {
			// The parent writes a line once every relay of the phase is
			// ready, so that they start claiming together.
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		}
		if err := relay.Run(ctx); err != nil {
			report.Error = err.Error()
		}
		cleanup()
	}
	report.PeakRSSKiB = peakRSSKiB()
	out, _ := json.Marshal(report)
	fmt.Println(string(out))
	if report.Error != "" {
		return 1
	}
	return 0
}

// writeAllocs writes the allocation profile of the process so far to path
// (go tool pprof -sample_index=alloc_space or alloc_objects).
func writeAllocs(path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bridge-bench: --memprofile: %v\n", err)
	}
}

// peakRSSKiB reads VmHWM, the peak resident set size, from /proc.
func peakRSSKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// child is a relay running in a child process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	mu     sync.Mutex
	lines  []string
	exited chan struct{}
}

// startRelays starts k relays on table, each in a child process, waits
// until every one is ready and then lets them all claim at once; when
// meter is not nil, it starts measuring right before. On error the relays
// already started are stopped.
func (e *env) startRelays(table string, k int, meter *cpuMeter) ([]*child, error) {
	var cs []*child
	for i := range k {
		cpu, mem := "", ""
		if i == 0 {
			cpu, mem = e.s.CPUProfile, e.s.MemProfile // the first relay's: one profile file
		}
		c, err := e.startChild(table, cpu, mem)
		if err != nil {
			stopAll(cs)
			return nil, fmt.Errorf("relay %d of %d: %w", i+1, k, err)
		}
		cs = append(cs, c)
	}
	if meter != nil {
		pids := make([]int, len(cs))
		for i, c := range cs {
			pids[i] = c.pid()
		}
		meter.start(pids)
	}
	for _, c := range cs {
		_, _ = io.WriteString(c.stdin, "go\n")
	}
	return cs, nil
}

// startRelay starts one relay on table; see startRelays.
func (e *env) startRelay(table string) (*child, error) {
	cs, err := e.startRelays(table, 1, nil)
	if err != nil {
		return nil, err
	}
	return cs[0], nil
}

func (e *env) startChild(table, cpuProfile, memProfile string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &child{exited: make(chan struct{})}
	c.cmd = exec.Command(self, childCommand, "--database-url", e.dbURL, "--table", table, "--nats-url", e.natsURL,
		"--batch-size", strconv.Itoa(e.s.BatchSize), "--max-in-flight", strconv.Itoa(e.s.MaxInFlight),
		"--cpuprofile", cpuProfile, "--memprofile", memProfile, "--delete-on-relay="+strconv.FormatBool(e.s.DeleteOnRelay), "--source", e.s.Source, "--hold")
	c.cmd.Stderr = os.Stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
			if sc.Text() == "ready" {
				close(ready)
			}
		}
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	select {
	case <-ready:
		return c, nil
	case <-c.exited:
		return nil, fmt.Errorf("relay exited before it was ready: %v", c.report().Error)
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		return nil, fmt.Errorf("relay not ready after 30s")
	}
}

// pid is the relay's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// stopAll stops relays and returns the largest peak RSS among them, in KiB,
// and the first error.
func stopAll(cs []*child) (peakKiB int64, err error) {
	for _, c := range cs {
		r, e := c.stop()
		peakKiB = max(peakKiB, r.PeakRSSKiB)
		if err == nil {
			err = e
		}
	}
	return peakKiB, err
}

// firstErr reports the first relay of cs that exited early.
func firstErr(cs []*child) error {
	for _, c := range cs {
		if err := c.err(); err != nil {
			return err
		}
	}
	return nil
}

// err reports a relay that exited early.
func (c *child) err() error {
	if c == nil {
		return nil
	}
	select {
	case <-c.exited:
		return fmt.Errorf("relay exited: %s", c.report().Error)
	default:
		return nil
	}
}

// stop sends SIGTERM, waits for the drain and returns the relay's report.
func (c *child) stop() (childReport, error) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(60 * time.Second):
		_ = c.cmd.Process.Kill()
		return childReport{}, fmt.Errorf("relay did not stop within 60s")
	}
	r := c.report()
	if r.Error != "" {
		return r, fmt.Errorf("relay: %s", r.Error)
	}
	return r, nil
}

func (c *child) report() childReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	var r childReport
	for _, l := range c.lines {
		_ = json.Unmarshal([]byte(l), &r)
	}
	return r
}
