package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source/mysqlbinlog"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
)

// env is what every phase uses: the database, NATS and a unique suffix for
// the tables and streams of this run.
type env struct {
	s       settings
	db      *outbox.DB
	dbURL   string
	schema  string   // PostgreSQL schema of this run, or ""
	tables  []string // MySQL tables of this run
	slots   []string // replication slots and publications of this run (--source postgres-wal)
	nc      *nats.Conn
	js      jetstream.JetStream
	natsURL string
	suffix  string
	payload []byte
	tmp     string
}

func bench(ctx context.Context, s settings) (*results, error) {
	if len(s.RelayCounts) == 0 {
		s.RelayCounts = []int{max(s.Relays, 1)}
	}
	s.Relays = s.RelayCounts[0]
	e := &env{s: s, suffix: randomHex(4), payload: make([]byte, s.PayloadBytes)}
	_, _ = rand.Read(e.payload)
	var err error
	if e.tmp, err = os.MkdirTemp("", "bridge-bench-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(e.tmp)

	stopNATS, err := e.startNATS()
	if err != nil {
		return nil, err
	}
	defer stopNATS()
	closeDB, err := e.openDB(ctx)
	if err != nil {
		return nil, err
	}
	defer closeDB()

	res := &results{Settings: s, Date: time.Now().UTC().Format("2006-01-02")}
	res.Settings.Database = e.db.Redacted
	res.Versions = versions{Go: runtime.Version(), NATSServer: e.nc.ConnectedServerVersion(), Database: e.databaseVersion(ctx)}

	phases := strings.Split(s.Phases, ",")
	if slices.Contains(phases, "limit") {
		lr, err := e.limit(ctx)
		if err != nil {
			return nil, fmt.Errorf("limit: %w", err)
		}
		res.LimitMsgsPerS = lr.MsgsPerS
		if lr.NATSCPU > 0 {
			res.LimitPublisherCPUUsPerMsg = usPerRow(lr.PublisherCPU, s.Rows)
			res.LimitNATSCPUUsPerMsg = usPerRow(lr.NATSCPU, s.Rows)
			res.RatioPublisherNATSCPU = lr.PublisherCPU.Seconds() / lr.NATSCPU.Seconds()
		}
	}
	if slices.Contains(phases, "bridge") {
		for i, k := range s.RelayCounts {
			b, err := e.bridge(ctx, i, k)
			if err != nil {
				if len(s.RelayCounts) > 1 {
					return nil, fmt.Errorf("bridge, %d relay(s): %w", k, err)
				}
				return nil, fmt.Errorf("bridge: %w", err)
			}
			res.BridgeRuns = append(res.BridgeRuns, b.run(k, s.Rows))
		}
		first := res.BridgeRuns[0]
		res.BridgeRowsPerS, res.PeakRSSMiB = first.RowsPerS, first.PeakRSSMiB
		res.RelayCPUUsPerRow, res.NATSCPUUsPerRow, res.DatabaseCPUUsPerRow = first.RelayCPUUsPerRow, first.NATSCPUUsPerRow, first.DatabaseCPUUsPerRow
		base := first
		if i := slices.IndexFunc(res.BridgeRuns, func(r bridgeRun) bool { return r.Relays == 1 }); i >= 0 {
			base = res.BridgeRuns[i]
		}
		res.BridgeScalingBaseRelays = base.Relays
		for i := range res.BridgeRuns {
			r := &res.BridgeRuns[i]
			r.Scaling = r.RowsPerS / base.RowsPerS
			if res.LimitMsgsPerS > 0 {
				r.RatioLimit = r.RowsPerS / res.LimitMsgsPerS
			}
		}
	}
	if slices.Contains(phases, "database") {
		if logSource(s.Source) {
			progress("database: skipped, it measures the table source's claims and marks (--source table)")
		} else {
			d, err := e.database(ctx)
			if err != nil {
				return nil, fmt.Errorf("database: %w", err)
			}
			res.setDatabase(d)
		}
	}
	if slices.Contains(phases, "latency") {
		l, err := e.latency(ctx, "latency", s.Rate, 1)
		if err != nil {
			return nil, fmt.Errorf("latency: %w", err)
		}
		res.LatencyP50Ms, res.LatencyP90Ms, res.LatencyP99Ms, res.LatencyMaxMs = l.all.quantile(0.50), l.all.quantile(0.90), l.all.quantile(0.99), l.all.quantile(1)
		res.LatencySteadyP50Ms, res.LatencySteadyP99Ms, res.LatencyFirstMs = l.steady.quantile(0.50), l.steady.quantile(0.99), ms(l.first)
	}
	if slices.Contains(phases, "latency-high") {
		l, err := e.latency(ctx, "lathigh", s.HighRate, s.HighRowsPerCommit)
		if err != nil {
			return nil, fmt.Errorf("latency-high: %w", err)
		}
		res.LatencyHighP50Ms, res.LatencyHighP90Ms, res.LatencyHighP99Ms, res.LatencyHighMaxMs = l.all.quantile(0.50), l.all.quantile(0.90), l.all.quantile(0.99), l.all.quantile(1)
		res.LatencyHighSteadyP50Ms, res.LatencyHighSteadyP99Ms, res.LatencyHighFirstMs = l.steady.quantile(0.50), l.steady.quantile(0.99), ms(l.first)
	}
	if slices.Contains(phases, "baseline") {
		if e.db.Dialect() != outbox.DialectPostgres {
			progress("baseline: skipped, it needs PostgreSQL (watermill-sql's PostgreSQL subscriber)")
		} else if res.BaselineRowsPerS, err = e.baseline(ctx); err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
	}
	if slices.Contains(phases, "producers") {
		if res.ProducerRuns, res.Producers, err = e.producers(ctx); err != nil {
			return nil, fmt.Errorf("producers: %w", err)
		}
	}
	if slices.Contains(phases, "tables") {
		t, err := e.manyTables(ctx)
		if err != nil {
			return nil, fmt.Errorf("tables: %w", err)
		}
		res.Tables = &t
	}
	if slices.Contains(phases, "idle") {
		idle, err := e.idle(ctx)
		if err != nil {
			return nil, fmt.Errorf("idle: %w", err)
		}
		res.Idle = &idle
	}
	if res.LimitMsgsPerS > 0 {
		res.RatioBridgeLimit = res.BridgeRowsPerS / res.LimitMsgsPerS
	}
	if res.BaselineRowsPerS > 0 {
		res.RatioBridgeBaseline = res.BridgeRowsPerS / res.BaselineRowsPerS
	}
	return res, nil
}

func (e *env) startNATS() (func(), error) {
	stop := func() {}
	var err error
	e.natsURL = e.s.NATSURL
	if e.s.Cluster {
		url, stopCluster, err := startCluster(filepath.Join(e.tmp, "jetstream"))
		if err != nil {
			return nil, err
		}
		e.natsURL, stop = url, stopCluster
	} else if e.natsURL == "" {
		srv, err := server.NewServer(&server.Options{
			Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(e.tmp, "jetstream"),
			NoSigs: true, NoLog: true,
		})
		if err != nil {
			return nil, err
		}
		srv.SetLoggerV2(serverLog, false, false, false)
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			return nil, fmt.Errorf("in-process nats-server did not start")
		}
		e.natsURL = srv.ClientURL()
		stop = func() { srv.Shutdown(); srv.WaitForShutdown() }
	}
	if e.nc, err = nats.Connect(e.natsURL, nats.MaxReconnects(-1)); err != nil {
		stop()
		return nil, fmt.Errorf("connect to %s: %w", e.natsURL, err)
	}
	if e.js, err = jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(4096)); err != nil {
		stop()
		return nil, err
	}
	return func() { e.nc.Close(); stop() }, nil
}

// startCluster starts three in-process JetStream servers routed to each
// other on loopback, storing under dir, and waits for a meta leader. It
// returns their client URLs, comma-separated.
func startCluster(dir string) (string, func(), error) {
	const size = 3
	ports := make([]int, size)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	var servers []*server.Server
	stop := func() {
		for _, srv := range servers {
			srv.Shutdown()
			srv.WaitForShutdown()
		}
	}
	var urls []string
	for i := range size {
		srv, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			Cluster: server.ClusterOpts{Name: "bench", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes, NoSigs: true, NoLog: true,
		})
		if err != nil {
			stop()
			return "", nil, err
		}
		go srv.Start()
		servers = append(servers, srv)
	}
	for _, srv := range servers {
		if !srv.ReadyForConnections(10 * time.Second) {
			stop()
			return "", nil, fmt.Errorf("in-process cluster server %s did not start", srv.Name())
		}
		urls = append(urls, srv.ClientURL())
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if slices.ContainsFunc(servers, (*server.Server).JetStreamIsLeader) {
			break
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, errors.New("in-process cluster elected no JetStream meta leader")
		}
	}
	return strings.Join(urls, ","), stop, nil
}

// stream creates a fresh file stream for one phase (R1, or R3 with
// --cluster) and returns its name and subject prefix; it is deleted when
// the run ends.
func (e *env) stream(ctx context.Context, phase string) (name, prefix string, err error) {
	name = strings.ToUpper(phase) + "_" + e.suffix
	prefix = phase + "_" + e.suffix
	replicas := 1
	if e.s.Cluster {
		replicas = 3
	}
	cfg := jetstream.StreamConfig{
		Name: name, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, Replicas: replicas,
		Duplicates: 2 * time.Minute,
	}
	for attempt := 1; ; attempt++ {
		_, err = e.js.CreateStream(ctx, cfg)
		// A stream deleted just before (the previous phase's) removes its
		// account's streams directory, once empty, on a goroutine of the
		// server's own (nats-server 2.15 server/stream.go, stream delete):
		// a stream created meanwhile can lose the directory under it, 10049
		// "error creating store for stream" (the server logs "could not
		// create storage directory … no such file or directory"). A second
		// try creates it again.
		var apiErr *jetstream.APIError
		if err == nil || attempt == 3 || !errors.As(err, &apiErr) || apiErr.ErrorCode != 10049 {
			return name, prefix, err
		}
		progress("stream %s: %v; creating it again", name, err)
		time.Sleep(100 * time.Millisecond)
	}
}

// dropTable drops a phase's table and the table of its migration versions
// (the run's schema, or its list of MySQL tables, drops anything left at
// the end).
func (e *env) dropTable(table string) {
	for _, t := range []string{table, table + "_migrations"} {
		if _, err := e.db.SQL.Exec("DROP TABLE IF EXISTS " + t); err != nil {
			progress("drop %s: %v", t, err)
		}
	}
}

// logSource reports a source that reads a log and claims nothing
// (postgres-wal, mysql-binlog): its span is from the first mark.
func logSource(source string) bool { return source == "postgres-wal" || source == "mysql-binlog" }

func (e *env) deleteStream(name string) {
	_ = e.js.DeleteStream(context.Background(), name)
}

func (e *env) openDB(ctx context.Context) (func(), error) {
	url := e.s.DatabaseURL
	if url == "" {
		url = "sqlite:" + filepath.Join(e.tmp, "outbox.db")
	}
	e.dbURL = url
	var err error
	if e.db, err = outbox.Open(ctx, url); err != nil {
		return nil, err
	}
	if e.s.Source == "mysql-binlog" {
		if e.db.Dialect() != outbox.DialectMySQL {
			e.db.Close()
			return nil, fmt.Errorf("--source mysql-binlog needs a mysql:// --database-url, not %s", e.db.Redacted)
		}
		if _, err := mysqlbinlog.CheckServer(ctx, e.db.SQL); err != nil {
			e.db.Close()
			return nil, err
		}
	}
	if e.s.Source == "postgres-wal" {
		if e.db.Dialect() != outbox.DialectPostgres {
			e.db.Close()
			return nil, fmt.Errorf("--source postgres-wal needs a postgres:// --database-url, not %s", e.db.Redacted)
		}
		if err := postgreswal.CheckWALLevel(ctx, e.db.SQL); err != nil {
			e.db.Close()
			return nil, err
		}
	}
	if e.db.Dialect() == outbox.DialectPostgres {
		e.schema = "bench_" + e.suffix
		if _, err := e.db.SQL.ExecContext(ctx, "CREATE SCHEMA "+e.schema); err != nil {
			e.db.Close()
			return nil, err
		}
	}
	return func() {
		for _, name := range e.slots {
			_, _ = e.db.SQL.Exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name)
			_, _ = e.db.SQL.Exec("DROP PUBLICATION IF EXISTS " + name)
		}
		if e.schema != "" {
			_, _ = e.db.SQL.Exec("DROP SCHEMA " + e.schema + " CASCADE")
		}
		for _, t := range e.tables {
			_, _ = e.db.SQL.Exec("DROP TABLE IF EXISTS " + t)
		}
		e.db.Close()
	}, nil
}

// table creates a migrated outbox table for one phase, with its
// publication and replication slot under --source postgres-wal.
func (e *env) table(ctx context.Context, phase string) (*outbox.Store, error) {
	store, err := e.plainTable(ctx, phase)
	if err == nil && e.s.Source == "mysql-binlog" {
		// Before the rows are written: they are read from the binary log
		// from the position stored now.
		if _, err := mysqlbinlog.Setup(ctx, e.db, store.Table()); err != nil {
			return nil, err
		}
		e.tables = append(e.tables, store.Table()+"_binlog")
		return store, nil
	}
	if err != nil || e.s.Source != "postgres-wal" {
		return store, err
	}
	// Before the rows are written: the slot delivers what is committed
	// after it exists.
	n := walNames(store.Table())
	if _, _, err := postgreswal.Setup(ctx, e.db.SQL, n); err != nil {
		return nil, err
	}
	e.slots = append(e.slots, n.Slot)
	return store, nil
}

// plainTable creates a migrated outbox table for one phase.
func (e *env) plainTable(ctx context.Context, phase string) (*outbox.Store, error) {
	name := "outbox_" + phase
	switch {
	case e.schema != "":
		name = e.schema + "." + name
	case e.db.Dialect() == outbox.DialectMySQL:
		// The tables of the URL's database, named per run and dropped at
		// the end with their migration versions, as PostgreSQL's are by
		// their schema.
		name = "bench_" + e.suffix + "_" + name
		e.tables = append(e.tables, name, name+"_migrations")
	}
	if _, err := outbox.Migrate(ctx, e.db, name); err != nil {
		return nil, err
	}
	if e.s.FillFactor > 0 { // a PostgreSQL URL (run checks it)
		if _, err := e.db.SQL.ExecContext(ctx, fmt.Sprintf("ALTER TABLE %s SET (fillfactor = %d)", name, e.s.FillFactor)); err != nil {
			return nil, err
		}
	}
	return outbox.NewStore(e.db, name)
}

// walNames are the publication and slot of a bench table: both named
// after it (schema and table joined by _).
func walNames(table string) postgreswal.Names {
	name := strings.ReplaceAll(table, ".", "_")
	return postgreswal.Names{Table: table, Publication: name, Slot: name}
}

func (e *env) databaseVersion(ctx context.Context) string {
	var v string
	q := "SELECT version()"
	switch e.db.Dialect() {
	case outbox.DialectSQLite:
		q = "SELECT 'SQLite ' || sqlite_version()"
	case outbox.DialectMySQL:
		q = "SELECT CONCAT(IF(VERSION() LIKE '%MariaDB%', 'MariaDB ', 'MySQL '), VERSION())"
	}
	if err := e.db.SQL.QueryRowContext(ctx, q).Scan(&v); err != nil {
		return string(e.db.Dialect())
	}
	if i := strings.Index(v, " on "); i > 0 {
		v = v[:i]
	}
	return v
}

// fill commits n rows with keys <prefix>-<1..n> (distinct across the
// tables of the tables phase, which share a stream and its duplicate
// window) and subjects <prefix>.<0..15>;
// with --ordering-keys K, row g gets the ordering key o-<g mod K>.
func (e *env) fill(ctx context.Context, store *outbox.Store, prefix string, n int) error {
	q := `INSERT INTO ` + store.Table() + ` (idempotency_key, subject, payload, headers, ordering_key)
		SELECT $1 || '-' || g, $1 || '.' || (g % 16), $2, '{}', CASE WHEN $4::int > 0 THEN 'o-' || (g % $4::int) END
		FROM generate_series(1, $3::int) AS g`
	if e.db.Dialect() == outbox.DialectSQLite {
		q = `INSERT INTO ` + store.Table() + ` (idempotency_key, subject, payload, headers, ordering_key)
		WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ?3)
		SELECT ?1 || '-' || g, ?1 || '.' || (g % 16), ?2, '{}', CASE WHEN ?4 > 0 THEN 'o-' || (g % ?4) END FROM s`
	}
	if e.db.Dialect() == outbox.DialectMySQL {
		return e.fillMySQL(ctx, store, prefix, n)
	}
	if _, err := e.db.SQL.ExecContext(ctx, q, prefix, e.payload, n, e.s.OrderingKeys); err != nil {
		return fmt.Errorf("insert %d rows: %w", n, err)
	}
	if e.db.Dialect() == outbox.DialectPostgres {
		_, err := e.db.SQL.ExecContext(ctx, "ANALYZE "+store.Table())
		return err
	}
	return nil
}

// fillMySQL is fill for MySQL and MariaDB, whose recursive CTEs stop at
// 1,000 rows by default: the numbers come from a cross join of digits, in
// statements of up to 100,000 rows.
func (e *env) fillMySQL(ctx context.Context, store *outbox.Store, prefix string, n int) error {
	digits := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	q := `INSERT INTO ` + store.Table() + ` (idempotency_key, subject, payload, headers, ordering_key)
		SELECT CONCAT(?, '-', g), CONCAT(?, '.', g % 16), ?, '{}', IF(? > 0, CONCAT('o-', g % ?), NULL)
		FROM (SELECT ? + a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d AS g
			FROM ` + digits + ` a, ` + digits + ` b, ` + digits + ` c, ` + digits + ` e, ` + digits + ` f) s
		WHERE g <= ? ORDER BY g`
	keys := max(e.s.OrderingKeys, 1)
	for first := 1; first <= n; first += 100_000 {
		if _, err := e.db.SQL.ExecContext(ctx, q, prefix, prefix, e.payload, e.s.OrderingKeys, keys, first, n); err != nil {
			return fmt.Errorf("insert rows %d to %d: %w", first, min(first+99_999, n), err)
		}
	}
	_, err := e.db.SQL.ExecContext(ctx, "ANALYZE TABLE "+store.Table())
	return err
}

// fillByCommits is fill in transactions of --rows-per-commit rows each
// (a multi-row INSERT), committed by 4 writers at once: the rows as a
// service's transactions leave them, each its own transaction in a log.
func (e *env) fillByCommits(ctx context.Context, store *outbox.Store, prefix string, n int) error {
	per := e.s.RowsPerCommit
	const writers = 4
	g, ctx := errgroup.WithContext(ctx)
	for w := range writers {
		g.Go(func() error {
			for first := 1 + w*per; first <= n; first += writers * per {
				count := min(per, n-first+1)
				var values []string
				var args []any
				for i := first; i < first+count; i++ {
					values = append(values, e.placeholders(len(args), 5))
					key := any(nil)
					if e.s.OrderingKeys > 0 {
						key = fmt.Sprintf("o-%d", i%e.s.OrderingKeys)
					}
					args = append(args, fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("%s.%d", prefix, i%16), e.payload, "{}", key)
				}
				q := `INSERT INTO ` + store.Table() + ` (idempotency_key, subject, payload, headers, ordering_key) VALUES ` + strings.Join(values, ", ")
				if _, err := e.db.SQL.ExecContext(ctx, q, args...); err != nil {
					return fmt.Errorf("insert rows %d to %d: %w", first, first+count-1, err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// placeholders is one row's "(…)" of k parameters after the first n, in
// the database's style ($n for PostgreSQL, ? otherwise).
func (e *env) placeholders(n, k int) string {
	ps := make([]string, k)
	for i := range ps {
		ps[i] = "?"
		if e.db.Dialect() == outbox.DialectPostgres {
			ps[i] = fmt.Sprintf("$%d", n+i+1)
		}
	}
	return "(" + strings.Join(ps, ", ") + ")"
}

// waitDone polls until n rows of store are done, printing progress.
func waitDone(ctx context.Context, store *outbox.Store, n int, what string, relays []*child) error {
	last := time.Now()
	for {
		st, err := store.Stats(ctx, 0)
		if err != nil {
			return err
		}
		done := st.Rows[outbox.StatusDone]
		if done >= int64(n) {
			return nil
		}
		if err := firstErr(relays); err != nil {
			return err
		}
		if time.Since(last) > 2*time.Second {
			progress("%s: %d of %d rows relayed", what, done, n)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		// Not more often: counting rows per status scans the table, and
		// every 100 ms that took a fifth of a core from the relay and the
		// database under test. The rate is read from the database clock,
		// so the poll does not change it.
		case <-time.After(time.Second):
		}
	}
}

// waitEmpty polls every 20 ms until store holds no rows (the relay deletes
// them at their PubAck), printing progress. The query walks the primary key
// from its start, where the index entries of deleted rows are skipped
// cheaply once a scan has marked them dead.
func waitEmpty(ctx context.Context, store *outbox.Store, n int, relays []*child) error {
	q := "SELECT count(*) FROM (SELECT 1 FROM " + store.Table() + " ORDER BY id LIMIT 1) AS t"
	last := time.Now()
	for {
		var left int
		if err := store.DB().SQL.QueryRowContext(ctx, q).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if err := firstErr(relays); err != nil {
			return err
		}
		if time.Since(last) > 2*time.Second {
			st, err := store.Stats(ctx, 0)
			if err != nil {
				return err
			}
			var rows int64
			for _, c := range st.Rows {
				rows += c
			}
			progress("bridge: %d of %d rows relayed and deleted", int64(n)-rows, n)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// span returns the time from the first claim to the last PubAck mark of a
// table, from the database clock; with fromMark (the postgres-wal source,
// which claims nothing), from the first mark.
func span(ctx context.Context, store *outbox.Store, fromMark bool) (time.Duration, error) {
	from := "first_claimed_at"
	if fromMark {
		from = "relayed_at"
	}
	a, b, err := spanTimes(ctx, store, from)
	return b.Sub(a), err
}

// spanTimes returns the earliest value of column from and the last
// relayed_at of a table (database clock).
func spanTimes(ctx context.Context, store *outbox.Store, from string) (first, last time.Time, err error) {
	var a, b any
	if err = store.DB().SQL.QueryRowContext(ctx, "SELECT min("+from+"), max(relayed_at) FROM "+store.Table()).Scan(&a, &b); err != nil {
		return first, last, err
	}
	if first, err = asTime(a); err != nil {
		return first, last, err
	}
	last, err = asTime(b)
	return first, last, err
}

// asTime reads a time as the drivers return it: a time.Time (pgx), or text
// in SQLite's layout or MySQL's DATETIME(6) layout (UTC).
func asTime(v any) (time.Time, error) {
	var text string
	switch t := v.(type) {
	case time.Time:
		return t, nil
	case string:
		text = t
	case []byte:
		text = string(t)
	default:
		return time.Time{}, fmt.Errorf("unexpected time value %T", v)
	}
	for _, layout := range []string{"2006-01-02T15:04:05.999Z07:00", "2006-01-02 15:04:05.999999"} {
		if t, err := time.Parse(layout, text); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("unexpected time %q", text)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
