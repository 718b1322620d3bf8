package main

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// cpuOf returns the user+system CPU time a process has used so far, read
// from /proc/<pid>/stat (clock ticks of 10 ms). Zero when it cannot be read
// (not Linux, or the process is gone).
func cpuOf(pid int) time.Duration {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return seconds(st.CPUTime())
}

// cpuOfCommands returns the user+system CPU time used so far by every
// process whose command name (/proc/<pid>/comm, at most 15 bytes) is one of
// names: all PostgreSQL backends and background workers are "postgres",
// MariaDB is "mariadbd" and MySQL "mysqld". Processes that exit between two
// readings take their time with them; a phase keeps its connections open,
// so its backends do not.
func cpuOfCommands(names ...string) time.Duration {
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue
		}
		for _, n := range names {
			if st.Comm == n {
				total += seconds(st.CPUTime())
			}
		}
	}
	return total
}

// procKey names a process across readings: a later process given the same
// pid has another start time.
type procKey struct {
	pid   int
	start uint64
}

// cpuByCommand returns the user+system CPU time used so far by each process
// whose command name is one of names (see cpuOfCommands).
func cpuByCommand(names ...string) map[procKey]time.Duration {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil
	}
	out := map[procKey]time.Duration{}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || !slices.Contains(names, st.Comm) {
			continue
		}
		out[procKey{st.PID, st.Starttime}] = seconds(st.CPUTime())
	}
	return out
}

// cpuSince is the CPU time the processes of now spent since the reading
// before: each one's advance, and the whole time of one that started
// meanwhile. A process that exited meanwhile is not in now, and its time
// since before is lost: the figure can be low, as when another client's
// sessions end during the phase, but it is never below zero (a sum over
// all processes, as cpuOfCommands gives, loses the whole lifetime of such
// a process, and went negative on a server that other tests used).
func cpuSince(before, now map[procKey]time.Duration) time.Duration {
	var total time.Duration
	for k, t := range now {
		total += t - before[k]
	}
	return total
}

// cpuOfSelf returns the user+system CPU time of this process (getrusage).
func cpuOfSelf() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// usPerRow is d spread over rows, in microseconds.
func usPerRow(d time.Duration, rows int) float64 {
	if rows <= 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(rows)
}

// localServerCommands returns the command names of the database server
// behind a database URL when it runs on this machine (host 127.0.0.1,
// localhost, ::1 or a Unix socket), and nil otherwise: the CPU of a remote
// server cannot be read from here, and SQLite runs inside the relay.
func localServerCommands(dbURL string) []string {
	var names []string
	switch {
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		names = []string{"postgres"}
	case strings.HasPrefix(dbURL, "mysql://"):
		names = []string{"mariadbd", "mysqld"}
	default:
		return nil
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil
	}
	switch h := u.Hostname(); {
	case h == "" || h == "127.0.0.1" || h == "localhost" || h == "::1" || strings.HasPrefix(h, "/"):
		return names
	case u.Query().Get("host") != "" && strings.HasPrefix(u.Query().Get("host"), "/"):
		return names
	}
	return nil
}

// cpuMeter reads, at the start and at the end of a phase, the CPU time of
// the relay processes, of the database server when it is local, and of
// NATS: this process when the nats-server runs in it, otherwise the local
// processes named nats-server.
type cpuMeter struct {
	db         []string // command names of the local database server; nil: not measured
	natsInProc bool
	relays     []int
	relay0     []time.Duration
	db0        map[procKey]time.Duration
	nats0      time.Duration
	relayTotal time.Duration
	dbTotal    time.Duration
	natsTotal  time.Duration
	// The machine: the wall-clock time between the readings, its cores,
	// and the CPU time all of them spent meanwhile (/proc/stat: all but
	// idle and iowait; zero when it cannot be read).
	t0          time.Time
	wall        time.Duration
	cores       int
	busy0       time.Duration
	machineBusy time.Duration
}

// machineBusy returns the CPU time all the machine's cores have spent
// busy so far (/proc/stat: user, nice, system, irq, softirq and steal;
// guest time is inside user), and their number; zero when it cannot be
// read.
func machineBusy() (time.Duration, int) {
	st, err := procfs.NewStat()
	if err != nil {
		return 0, 0
	}
	c := st.CPUTotal
	return seconds(c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal), len(st.CPU)
}

// machinePct is d as a share of what the machine's cores could spend over
// the measurement, in per cent; zero when not known.
func (m *cpuMeter) machinePct(d time.Duration) float64 {
	if m.cores == 0 || m.wall <= 0 {
		return 0
	}
	return 100 * d.Seconds() / (m.wall.Seconds() * float64(m.cores))
}

func newCPUMeter(dbURL string, natsInProc bool) *cpuMeter {
	return &cpuMeter{db: localServerCommands(dbURL), natsInProc: natsInProc}
}

// dbText is the database's CPU per row for a progress line.
func (m *cpuMeter) dbText(rows int) string {
	if m.db == nil {
		return "not measured"
	}
	return fmt.Sprintf("%.1f µs", usPerRow(m.dbTotal, rows))
}

func (m *cpuMeter) nats() time.Duration {
	if m.natsInProc {
		return cpuOfSelf()
	}
	return cpuOfCommands("nats-server")
}

// start takes the first readings, for the relay processes pids.
func (m *cpuMeter) start(pids []int) {
	m.relays = pids
	m.relay0 = make([]time.Duration, len(pids))
	for i, pid := range pids {
		m.relay0[i] = cpuOf(pid)
	}
	if m.db != nil {
		m.db0 = cpuByCommand(m.db...)
	}
	m.nats0 = m.nats()
	m.busy0, m.cores = machineBusy()
	m.t0 = time.Now()
}

// stop takes the second readings; the processes must still run.
func (m *cpuMeter) stop() {
	m.relayTotal = 0
	for i, pid := range m.relays {
		m.relayTotal += cpuOf(pid) - m.relay0[i]
	}
	if m.db != nil {
		m.dbTotal = cpuSince(m.db0, cpuByCommand(m.db...))
	}
	m.natsTotal = m.nats() - m.nats0
	m.wall = time.Since(m.t0)
	if busy, cores := machineBusy(); cores == m.cores && m.cores > 0 {
		m.machineBusy = busy - m.busy0
	} else {
		m.cores = 0
	}
}
