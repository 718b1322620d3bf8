package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/procfs"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source/table"
)

// The database phase drains a table with the relay's own statements — the
// outbox Store's requeue, claim and mark, on a pool opened as the relay
// opens its database — and nothing else: no NATS, no Watermill. It
// measures what the database server spends per row on them.

// databaseOwner is the relay name of the database phase's leases and
// sessions.
const databaseOwner = "bench-database"

// statementLimit bounds each statement of the database phase, so that a
// statement waiting on the phase's one pooled session fails instead of
// hanging the bench.
const statementLimit = 2 * time.Minute

// databaseResult is what the database phase measures.
type databaseResult struct {
	rows int
	// rate is rows per second over the drain, on this process's clock.
	rate float64
	// client is the CPU time of this process over the drain: the Store,
	// the driver and, on SQLite, the database engine.
	client time.Duration
	// server is the CPU time of the server task that served the drain's
	// session; nil when not measured, serverWhy says why.
	server    *serverCPU
	serverWhy string
	// walBytes is the write-ahead log (PostgreSQL) or InnoDB redo log
	// (MySQL, MariaDB) the whole server wrote during the drain; nil when
	// not read.
	walBytes *int64
	// hotPct is the share of the table's updates during the drain that
	// were HOT, in per cent (PostgreSQL); nil otherwise.
	hotPct *float64
	// checkpoints is how many checkpoints the PostgreSQL server counted
	// during the drain; nil otherwise.
	checkpoints *int64
	counts      drainCounts
}

// serverCPU is the CPU time of the server task serving the drain's
// session: total from /proc/<pid>/stat (utime+stime, clock ticks), and
// the time on CPU while each kind of statement ran, from
// /proc/<pid>/schedstat (nanoseconds).
type serverCPU struct {
	total                time.Duration
	requeue, claim, mark time.Duration
}

// drainCounts counts the statements of a drain and the rows they moved.
type drainCounts struct {
	requeues, claims, marks   int
	requeued, claimed, marked int64
	fenced                    int64 // marked rows that matched no row: their lease was requeued meanwhile
}

// database runs the database phase: N rows committed to a fresh table,
// then drained by one session that plays one relay (see drainer), with
// the server's CPU, WAL and HOT updates read around the drain.
func (e *env) database(ctx context.Context) (databaseResult, error) {
	res := databaseResult{rows: e.s.Rows}
	bench, err := e.plainTable(ctx, "database")
	if err != nil {
		return res, err
	}
	// The relay's pool (OpenSession), held to one session so that one
	// server task serves every statement; sessions are not recycled
	// during the phase, so that the task's CPU is not lost with it.
	db, err := outbox.OpenSession(ctx, e.dbURL, outbox.Session{
		Name: outbox.SessionName(databaseOwner), MaxLifetime: 24 * time.Hour, MaxIdleTime: 24 * time.Hour,
	})
	if err != nil {
		return res, err
	}
	defer db.Close()
	db.SQL.SetMaxOpenConns(1)
	db.SQL.SetMaxIdleConns(1)
	store, err := outbox.NewStore(db, bench.Table())
	if err != nil {
		return res, err
	}
	// MaxPayload: the NATS server's max_payload; the relay takes off the
	// least its headers need, which changes nothing for rows of --size
	// bytes well under it.
	d := &drainer{
		store: store, owner: databaseOwner, batch: e.s.BatchSize, maxInFlight: e.s.MaxInFlight,
		maxBytes: int64(config.MaxInFlightBytesDefault), maxPayload: e.nc.MaxPayload(), del: e.s.DeleteOnRelay,
		stream: "DATABASE_" + e.suffix,
	}
	// The session's first statements load the catalog of the table and
	// plan the statements for the first time: on the empty table, before
	// the measurement.
	if err := d.warmUp(ctx); err != nil {
		return res, fmt.Errorf("warm-up on the empty table: %w", err)
	}
	task, why := findServerTask(ctx, db, e.dbURL)
	res.serverWhy = why
	if e.db.Dialect() == outbox.DialectPostgres {
		// Pages the fill writes after a checkpoint carry no full-page
		// images into the drain's WAL, unless another checkpoint starts.
		if _, err := e.db.SQL.ExecContext(ctx, "CHECKPOINT"); err != nil {
			progress("database: CHECKPOINT before the fill refused (%v); a checkpoint during the drain counts in its WAL and CPU", err)
		}
	}
	progress("database: committing %d rows to %s", e.s.Rows, bench.Table())
	if err := e.fill(ctx, bench, "database_"+e.suffix, e.s.Rows); err != nil {
		return res, err
	}
	upd0, err := e.tableWrites(ctx, bench.Table())
	if err != nil {
		return res, err
	}
	wal0, walErr := e.walPosition(ctx)
	ckpt0, ckptErr := e.checkpoints(ctx)

	progress("database: draining with claims of %d rows, %d in flight at most, marks of a claim's rows (%s)", e.s.BatchSize, e.s.MaxInFlight, db.Dialect())
	d.task = task
	var cpu0 time.Duration
	if task != nil {
		cpu0 = task.cpu()
	}
	client0, start := cpuOfSelf(), time.Now()
	if err := d.run(ctx); err != nil {
		return res, err
	}
	elapsed, client := time.Since(start), cpuOfSelf()-client0
	if task != nil {
		total := task.cpu() - cpu0
		if again, _ := findServerTask(ctx, db, e.dbURL); again == nil || again.id != task.id {
			res.serverWhy = "the session was replaced during the drain, and its server task with it"
		} else {
			res.server = &serverCPU{total: total, requeue: d.onCPU[stepRequeue], claim: d.onCPU[stepClaim], mark: d.onCPU[stepMark]}
		}
	}
	res.rate, res.client, res.counts = float64(e.s.Rows)/elapsed.Seconds(), client, d.counts
	if walErr == nil {
		if wal, err := e.walSince(ctx, wal0); err == nil {
			res.walBytes = &wal
		}
	}
	if ckptErr == nil {
		if ckpt, err := e.checkpoints(ctx); err == nil {
			n := ckpt - ckpt0
			res.checkpoints = &n
		}
	}
	if err := checkDrained(ctx, bench, e.s.Rows, e.s.DeleteOnRelay, d.counts); err != nil {
		return res, err
	}
	// A PostgreSQL backend reports its table statistics at most once a
	// second, and at its exit: end the session, then wait for them.
	if err := db.Close(); err != nil {
		return res, err
	}
	if e.db.Dialect() == outbox.DialectPostgres {
		pct, err := e.hotShare(ctx, bench.Table(), upd0, d.counts, e.s.DeleteOnRelay)
		if err != nil {
			return res, err
		}
		res.hotPct = &pct
	}
	var r results
	r.setDatabase(res)
	progress("database: %.0f rows/s (%d claims, %d marks, %d requeues); per row: %s",
		res.rate, d.counts.claims, d.counts.marks, d.counts.requeues, r.databasePhaseText())
	return res, nil
}

// The kinds of statements of a drain.
const (
	stepRequeue = iota
	stepClaim
	stepMark
)

// drainer plays one relay against store, without NATS, as
// table.Subscriber drives the same Store: the in-flight recovery
// (RequeueInflightOlderThan with the default lease) first and then every
// rescue interval (table.RescueIntervalFor: 3 s), as the subscriber's
// rescuer runs it; a claim (ClaimBatch) of up to batch rows while fewer than
// maxInFlight rows and maxBytes of payloads and headers are in flight.
// Each claimed batch counts as published at once and is marked done (or
// deleted, with del) as one MarkDone, oldest first, when the in-flight
// room is used up or a claim finds nothing. One session runs every
// statement in turn; the relay runs its claims and marks on two sessions
// at once, with marks of whatever settled meanwhile (up to 1,000 rows).
type drainer struct {
	store              *outbox.Store
	owner              string
	batch, maxInFlight int
	maxBytes           int64
	maxPayload         int64
	del                bool
	stream             string
	// task, when set, is read around every statement for the split of
	// onCPU.
	task   *serverTask
	onCPU  [3]time.Duration
	counts drainCounts
}

// lease is one claimed batch awaiting its mark.
type lease struct {
	done  []outbox.Done
	bytes int64
}

// warmUp runs each statement once on the empty table: nothing is claimed,
// and the mark names no row.
func (d *drainer) warmUp(ctx context.Context) error {
	if _, err := d.store.RequeueInflightOlderThan(ctx, config.InflightTimeoutDefault); err != nil {
		return err
	}
	rows, err := d.store.ClaimBatch(ctx, outbox.ClaimParams{Owner: d.owner, Limit: d.batch, MaxBytes: d.maxBytes, MaxPayload: d.maxPayload})
	if err != nil {
		return err
	}
	if len(rows) > 0 {
		return fmt.Errorf("claimed %d rows from a table that should be empty", len(rows))
	}
	_, err = d.store.MarkDone(ctx, d.owner, []outbox.Done{{ID: 0, Attempt: 1, Stream: d.stream, Seq: 1}}, d.del)
	return err
}

// run drains the table: it returns when a claim finds nothing and no
// claimed row awaits its mark.
func (d *drainer) run(ctx context.Context) error {
	var leases []lease
	inFlight, inBytes := 0, int64(0)
	var seq uint64
	var nextRequeue time.Time
	for {
		if now := time.Now(); !now.Before(nextRequeue) {
			err := d.statement(ctx, stepRequeue, func(ctx context.Context) error {
				n, err := d.store.RequeueInflightOlderThan(ctx, config.InflightTimeoutDefault)
				d.counts.requeues++
				d.counts.requeued += int64(n)
				return err
			})
			if err != nil {
				return err
			}
			nextRequeue = now.Add(table.RescueIntervalFor(config.InflightTimeoutDefault))
		}
		room, byteRoom := d.maxInFlight-inFlight, d.maxBytes-inBytes
		if room <= 0 || byteRoom <= 0 {
			if err := d.mark(ctx, leases[0]); err != nil {
				return err
			}
			inFlight, inBytes, leases = inFlight-len(leases[0].done), inBytes-leases[0].bytes, leases[1:]
			continue
		}
		var rows []outbox.Row
		err := d.statement(ctx, stepClaim, func(ctx context.Context) (err error) {
			rows, err = d.store.ClaimBatch(ctx, outbox.ClaimParams{Owner: d.owner, Limit: min(d.batch, room), MaxBytes: byteRoom, MaxPayload: d.maxPayload})
			d.counts.claims++
			d.counts.claimed += int64(len(rows))
			return err
		})
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			if len(leases) == 0 {
				return nil
			}
			// Rows held back behind their ordering key's head in flight:
			// the relay claims again once a mark was written.
			if err := d.mark(ctx, leases[0]); err != nil {
				return err
			}
			inFlight, inBytes, leases = inFlight-len(leases[0].done), inBytes-leases[0].bytes, leases[1:]
			continue
		}
		l := lease{done: make([]outbox.Done, len(rows))}
		for i, r := range rows {
			seq++
			l.done[i] = outbox.Done{ID: r.ID, Attempt: r.Attempt, Stream: d.stream, Seq: seq}
			l.bytes += int64(len(r.Payload) + len(r.Headers)) // as relay.max_in_flight_bytes counts a row
		}
		leases = append(leases, l)
		inFlight, inBytes = inFlight+len(rows), inBytes+l.bytes
	}
}

// mark writes one batch's PubAcks.
func (d *drainer) mark(ctx context.Context, l lease) error {
	return d.statement(ctx, stepMark, func(ctx context.Context) error {
		n, err := d.store.MarkDone(ctx, d.owner, l.done, d.del)
		d.counts.marks++
		d.counts.marked += n
		d.counts.fenced += int64(len(l.done)) - n
		return err
	})
}

// statement runs one statement within statementLimit and adds the server
// task's time on CPU meanwhile to the statement's kind.
func (d *drainer) statement(ctx context.Context, step int, run func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, statementLimit)
	defer cancel()
	var before time.Duration
	if d.task != nil {
		before = d.task.onCPU()
	}
	err := run(ctx)
	if d.task != nil {
		d.onCPU[step] += d.task.onCPU() - before
	}
	return err
}

// checkDrained checks that every row was relayed once: all done (or none
// left, with del), and the marks changed exactly n rows.
func checkDrained(ctx context.Context, store *outbox.Store, n int, del bool, c drainCounts) error {
	st, err := store.Stats(ctx, 0)
	if err != nil {
		return err
	}
	var left int64
	for status, rows := range st.Rows {
		if status != outbox.StatusDone || del {
			left += rows
		}
	}
	if c.marked != int64(n) || left > 0 || (!del && st.Rows[outbox.StatusDone] != int64(n)) {
		return fmt.Errorf("the drain marked %d rows of %d (%d fenced); %d rows done, %d left in other states",
			c.marked, n, c.fenced, st.Rows[outbox.StatusDone], left)
	}
	return nil
}

// serverTask is the server's process (a PostgreSQL backend) or thread
// (the MySQL or MariaDB thread of a connection) that serves one session,
// read from this machine's /proc.
type serverTask struct {
	id   int // process or thread id
	proc procfs.Proc
}

// cpu is the task's user+system CPU time so far (/proc/…/stat, clock
// ticks of 10 ms); zero when it cannot be read.
func (t *serverTask) cpu() time.Duration {
	st, err := t.proc.Stat()
	if err != nil {
		return 0
	}
	return seconds(st.CPUTime())
}

// onCPU is the task's time on CPU so far (/proc/…/schedstat, in
// nanoseconds); zero when it cannot be read.
func (t *serverTask) onCPU() time.Duration {
	st, err := t.proc.Schedstat()
	if err != nil {
		return 0
	}
	return time.Duration(st.RunningNanoseconds)
}

// findServerTask returns the server task serving db's session (db holds
// one), or nil and why it cannot be read from here: SQLite runs in this
// process, the server is not on this machine (see localServerCommands),
// or the id the server gives is not one of its tasks here (another PID
// namespace, such as a container's). PostgreSQL names its backend with
// pg_backend_pid(); MariaDB the connection's thread with
// information_schema.PROCESSLIST's TID column (10.5+), MySQL with
// performance_schema.threads' THREAD_OS_ID (8.0; performance_schema on).
func findServerTask(ctx context.Context, db *outbox.DB, dbURL string) (*serverTask, string) {
	if db.Dialect() == outbox.DialectSQLite {
		return nil, "SQLite runs inside this process: its CPU is in the client figure"
	}
	servers := localServerCommands(dbURL)
	if servers == nil {
		return nil, "the database server is not on this machine"
	}
	if db.Dialect() == outbox.DialectPostgres {
		var pid int
		if err := db.SQL.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return nil, fmt.Sprintf("pg_backend_pid(): %v", err)
		}
		p, err := procfs.NewProc(pid)
		if err == nil {
			if st, err := p.Stat(); err == nil && slices.Contains(servers, st.Comm) {
				return &serverTask{id: pid, proc: p}, ""
			}
		}
		return nil, fmt.Sprintf("backend %d is not a postgres process on this machine (another PID namespace?)", pid)
	}
	var tid sql.NullInt64
	err := db.SQL.QueryRowContext(ctx, "SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()").Scan(&tid)
	if err != nil {
		err = db.SQL.QueryRowContext(ctx, "SELECT THREAD_OS_ID FROM performance_schema.threads WHERE PROCESSLIST_ID = CONNECTION_ID()").Scan(&tid)
	}
	if err != nil || !tid.Valid {
		return nil, fmt.Sprintf("the connection's thread id is not given (MariaDB 10.5+: information_schema.PROCESSLIST.TID; MySQL: performance_schema.threads.THREAD_OS_ID): %v", err)
	}
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil, err.Error()
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || !slices.Contains(servers, st.Comm) {
			continue
		}
		if t, err := p.Thread(int(tid.Int64)); err == nil {
			if _, err := t.Stat(); err == nil {
				return &serverTask{id: int(tid.Int64), proc: t}, ""
			}
		}
	}
	return nil, fmt.Sprintf("thread %d is not a thread of a local %v process (another PID namespace?)", tid.Int64, servers)
}

// walPosition is the server's current write-ahead log position:
// pg_current_wal_lsn() on PostgreSQL, the InnoDB redo log's LSN on
// MariaDB (Innodb_lsn_current) and MySQL 8.0.30+
// (Innodb_redo_log_current_lsn). SQLite has none.
func (e *env) walPosition(ctx context.Context) (string, error) {
	var pos string
	var err error
	switch e.db.Dialect() {
	case outbox.DialectPostgres:
		err = e.db.SQL.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&pos)
	case outbox.DialectMySQL:
		var name string
		err = e.db.SQL.QueryRowContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_lsn_current', 'Innodb_redo_log_current_lsn')").Scan(&name, &pos)
	default:
		err = fmt.Errorf("no write-ahead log position on %s", e.db.Dialect())
	}
	return pos, err
}

// walSince is the bytes of write-ahead log (or redo log) written since
// walPosition returned from.
func (e *env) walSince(ctx context.Context, from string) (int64, error) {
	if e.db.Dialect() == outbox.DialectPostgres {
		var n int64
		err := e.db.SQL.QueryRowContext(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint", from).Scan(&n)
		return n, err
	}
	to, err := e.walPosition(ctx)
	if err != nil {
		return 0, err
	}
	var a, b int64
	if _, err := fmt.Sscan(from, &a); err != nil {
		return 0, err
	}
	if _, err := fmt.Sscan(to, &b); err != nil {
		return 0, err
	}
	return b - a, nil
}

// checkpoints is the number of checkpoints the PostgreSQL server has
// counted (pg_stat_checkpointer from PostgreSQL 17, pg_stat_bgwriter
// before).
func (e *env) checkpoints(ctx context.Context) (int64, error) {
	if e.db.Dialect() != outbox.DialectPostgres {
		return 0, fmt.Errorf("no checkpoint count on %s", e.db.Dialect())
	}
	var version int
	if err := e.db.SQL.QueryRowContext(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return 0, err
	}
	q := "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
	if version >= 170000 {
		q = "SELECT num_timed + num_requested FROM pg_stat_checkpointer"
	}
	var n int64
	err := e.db.SQL.QueryRowContext(ctx, q).Scan(&n)
	return n, err
}

// tableWrites are a PostgreSQL table's cumulative statistics of updated,
// HOT-updated and deleted rows (pg_stat_user_tables); zero elsewhere.
type tableWrites struct{ upd, hot, del int64 }

func (e *env) tableWrites(ctx context.Context, table string) (tableWrites, error) {
	var w tableWrites
	if e.db.Dialect() != outbox.DialectPostgres {
		return w, nil
	}
	err := e.db.SQL.QueryRowContext(ctx, "SELECT n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE relid = $1::regclass", table).
		Scan(&w.upd, &w.hot, &w.del)
	return w, err
}

// hotShare waits until the table's statistics count every update and
// delete of the drain (a backend reports them at most once a second and
// when it exits), up to 10 s, and returns the share of the updates that
// were HOT, in per cent.
func (e *env) hotShare(ctx context.Context, table string, before tableWrites, c drainCounts, del bool) (float64, error) {
	wantUpd, wantDel := c.claimed+c.requeued+c.marked, int64(0)
	if del {
		wantUpd, wantDel = c.claimed+c.requeued, c.marked
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		w, err := e.tableWrites(ctx, table)
		if err != nil {
			return 0, err
		}
		upd, hot, dels := w.upd-before.upd, w.hot-before.hot, w.del-before.del
		if upd >= wantUpd && dels >= wantDel || time.Now().After(deadline) {
			if upd < wantUpd || dels < wantDel {
				progress("database: the table's statistics count %d updates and %d deletes of %d and %d after 10 s; HOT share from those", upd, dels, wantUpd, wantDel)
			}
			if upd == 0 {
				return 0, nil
			}
			return 100 * float64(hot) / float64(upd), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setDatabase records the database phase's figures per row.
func (r *results) setDatabase(d databaseResult) {
	perRow := func(v time.Duration) *float64 {
		f := usPerRow(v, d.rows)
		return &f
	}
	r.DatabasePhaseRowsPerS = d.rate
	r.DatabasePhaseClientCPUUsPerRow = perRow(d.client)
	if d.server != nil {
		r.DatabasePhaseCPUUsPerRow = perRow(d.server.total)
		r.DatabasePhaseRequeueUsPerRow = perRow(d.server.requeue)
		r.DatabasePhaseClaimUsPerRow = perRow(d.server.claim)
		r.DatabasePhaseMarkUsPerRow = perRow(d.server.mark)
	}
	if d.walBytes != nil {
		f := float64(*d.walBytes) / float64(d.rows)
		r.DatabasePhaseWALBytesPerRow = &f
	}
	r.DatabasePhaseHOTUpdatePct, r.DatabasePhaseCheckpoints = d.hotPct, d.checkpoints
	r.databaseNotMeasured = d.serverWhy
}

// databasePhaseText is the database phase's line of the table.
func (r *results) databasePhaseText() string {
	s := "server CPU not measured (" + r.databaseNotMeasured + ")"
	if r.DatabasePhaseCPUUsPerRow != nil {
		s = fmt.Sprintf("server CPU %.1f µs (on CPU in requeue %.1f, claim %.1f, mark %.1f)", *r.DatabasePhaseCPUUsPerRow,
			*r.DatabasePhaseRequeueUsPerRow, *r.DatabasePhaseClaimUsPerRow, *r.DatabasePhaseMarkUsPerRow)
	}
	s += fmt.Sprintf(", client CPU %.1f µs", *r.DatabasePhaseClientCPUUsPerRow)
	if r.DatabasePhaseWALBytesPerRow != nil {
		s += fmt.Sprintf(", WAL %.0f B", *r.DatabasePhaseWALBytesPerRow)
	}
	if r.DatabasePhaseHOTUpdatePct != nil {
		s += fmt.Sprintf(", HOT %.1f %% of updates", *r.DatabasePhaseHOTUpdatePct)
	}
	if r.DatabasePhaseCheckpoints != nil {
		s += fmt.Sprintf(", %d checkpoints during the drain", *r.DatabasePhaseCheckpoints)
	}
	return s
}
