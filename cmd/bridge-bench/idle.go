package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/procfs"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// idleResult is what the idle phase measures: the database CPU an idle
// relay costs, as a share of one core.
type idleResult struct {
	// SessionsPctOfCore is the CPU time (user+system) of the database
	// sessions (PostgreSQL backends, MariaDB/MySQL connection threads) of
	// the bench's database other than the bench's own, over the phase,
	// per cent of one core: the relay's sessions, on a machine whose other
	// databases do not count.
	SessionsPctOfCore float64 `json:"sessions_pct_of_core"`
	// ServerPctOfCore is the whole local server's CPU over the same time
	// (every database and background process: on a shared machine it
	// includes others' work; absent when processes of the server ended
	// meanwhile and took their time with them, leaving less than before).
	ServerPctOfCore *float64 `json:"server_pct_of_core,omitempty"`
	Sessions        int      `json:"sessions"`
	Seconds         float64  `json:"seconds"`
}

// idle starts a relay on an empty table, lets it settle for 5 s (its
// polls relax to relay.poll_interval), then measures for --idle-duration
// the CPU time the database spends on it (see idleResult). It needs the
// database server on this machine, and PostgreSQL or MariaDB (MySQL 8
// has no thread id in its process list).
func (e *env) idle(ctx context.Context) (idleResult, error) {
	var res idleResult
	server := localServerCommands(e.dbURL)
	if server == nil {
		return res, fmt.Errorf("the idle phase reads the database server's CPU from /proc: it needs a PostgreSQL or MySQL server on this machine, not %s", e.db.Redacted)
	}
	store, err := e.table(ctx, "idle")
	if err != nil {
		return res, err
	}
	c, err := e.startRelay(store.Table())
	if err != nil {
		return res, err
	}
	defer func() { _, _ = c.stop() }()
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(5 * time.Second):
	}
	cpu0, err := e.sessionCPU(ctx, true)
	if err != nil {
		return res, err
	}
	server0 := cpuOfCommands(server...)
	start := time.Now()
	progress("idle: measuring the database's CPU for %s with an idle relay", e.s.IdleDuration)
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(e.s.IdleDuration):
	}
	if err := firstErr([]*child{c}); err != nil {
		return res, err
	}
	cpu1, err := e.sessionCPU(ctx, false)
	if err != nil {
		return res, err
	}
	elapsed := time.Since(start)
	var sessions time.Duration
	for id, cpu := range cpu1 {
		// A session opened meanwhile (a PostgreSQL backend) counts whole:
		// cpu0 has no entry.
		sessions += cpu - cpu0[id]
	}
	res.Sessions = len(cpu1)
	res.Seconds = elapsed.Seconds()
	res.SessionsPctOfCore = 100 * sessions.Seconds() / elapsed.Seconds()
	if d := cpuOfCommands(server...) - server0; d >= 0 {
		pct := 100 * d.Seconds() / elapsed.Seconds()
		res.ServerPctOfCore = &pct
	}
	progress("idle: the relay's database sessions %.3f %% of a core (%d sessions)", res.SessionsPctOfCore, res.Sessions)
	return res, nil
}

// sessionCPU returns the CPU time (user+system) used so far by each session
// connected to the bench's database other than the one asking, by the
// operating-system id of its process (PostgreSQL: one per session) or of
// its thread in the server (MariaDB). With baseline, on MariaDB, it returns
// every thread of the server: a session opened later is served by a thread
// from the server's thread cache, whose time so far is someone else's (an
// idle run on 2026-12-02 counted 6.8 % of a core for its sessions, the
// whole server 0.27 %).
func (e *env) sessionCPU(ctx context.Context, baseline bool) (map[int]time.Duration, error) {
	out := map[int]time.Duration{}
	if e.db.Dialect() != outbox.DialectMySQL {
		ids, err := e.sessionIDs(ctx)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			out[id] = cpuOf(id)
		}
		return out, nil
	}
	// /proc/<tid>/stat of a thread counts its whole process; its own time
	// is in /proc/<pid>/task/<tid>/stat.
	server, err := serverProc("mariadbd", "mysqld")
	if err != nil {
		return nil, err
	}
	var threads procfs.Procs
	if baseline {
		if threads, err = procfs.AllThreads(server.PID); err != nil {
			return nil, fmt.Errorf("list the database server's threads: %w", err)
		}
	} else {
		ids, err := e.sessionIDs(ctx)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if th, err := server.Thread(id); err == nil { // else ended meanwhile
				threads = append(threads, th)
			}
		}
	}
	for _, th := range threads {
		if st, err := th.Stat(); err == nil {
			out[th.PID] = seconds(st.CPUTime())
		}
	}
	return out, nil
}

// serverProc returns the first process whose command name is one of names.
func serverProc(names ...string) (procfs.Proc, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return procfs.Proc{}, err
	}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && slices.Contains(names, st.Comm) {
			return p, nil
		}
	}
	return procfs.Proc{}, fmt.Errorf("no process named %v on this machine", names)
}

// sessionIDs returns the operating-system process (PostgreSQL) or thread
// (MariaDB) ids of the sessions connected to the bench's database, other
// than the one asking.
func (e *env) sessionIDs(ctx context.Context) ([]int, error) {
	q := `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`
	if e.db.Dialect() == outbox.DialectMySQL {
		// MariaDB 10.5+: TID is the connection's thread id in the kernel.
		q = `SELECT TID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID()`
	}
	rows, err := e.db.SQL.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list the database's sessions: %w", err)
	}
	defer rows.Close()
	var ids []int
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
