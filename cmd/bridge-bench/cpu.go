package main

import (
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"github.com/outbox-bridge/bridge/internal/outbox"
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
// names, with that of its children that ended and were waited for: all
// PostgreSQL backends and background workers are "postgres", MariaDB is
// "mariadbd" and MySQL "mysqld". A backend that ends between two readings
// (a session the relay's pool closed or replaced, another client's) moves
// its time into the postmaster's children's time, so the difference of two
// readings keeps it; without the children's time it lost the whole
// lifetime of every such session, which made the figure low or negative.
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
				total += seconds(st.CPUTime()) + ticks(st.CUTime+st.CSTime)
			}
		}
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

// ticks converts clock ticks of /proc/<pid>/stat (USER_HZ, 100 on Linux,
// as procfs assumes) to a duration.
func ticks(n int) time.Duration { return time.Duration(n) * (time.Second / 100) }

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
	switch _, dialect, _ := outbox.SchemeOf(dbURL); dialect {
	case outbox.DialectPostgres:
		names = []string{"postgres"}
	case outbox.DialectMySQL:
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
	db0, nats0 time.Duration
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
		m.db0 = cpuOfCommands(m.db...)
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
		m.dbTotal = cpuOfCommands(m.db...) - m.db0
	}
	m.natsTotal = m.nats() - m.nats0
	m.wall = time.Since(m.t0)
	if busy, cores := machineBusy(); cores == m.cores && m.cores > 0 {
		m.machineBusy = busy - m.busy0
	} else {
		m.cores = 0
	}
}
