package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Tests of source: mysql-binlog with the real binary, against the binary
// log test server (bridgetest.MySQLBinlogTable; .ci/mariadb-binlog).

// binlogEnv is one outbox table on the binary log test server and the NATS
// the relays publish to.
type binlogEnv struct {
	url, table string
	db         *sql.DB
	natsURL    string
	js         jetstream.JetStream
	dir        string
}

func newBinlogEnv(t *testing.T) *binlogEnv {
	t.Helper()
	return newBinlogEnvWindow(t, 2*time.Minute)
}

// newBinlogEnvWindow is newBinlogEnv with a stream EVENTS whose duplicate
// window is window.
func newBinlogEnvWindow(t *testing.T, window time.Duration) *binlogEnv {
	t.Helper()
	url, table := bridgetest.MySQLBinlogTable(t)
	n := bridgetest.StartNATS(t)
	db, err := outbox.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	js := natsClient(t, n.URL())
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: window})
	require.NoError(t, err)
	e := &binlogEnv{url: url, table: table, db: db.SQL, natsURL: n.URL(), js: js, dir: t.TempDir()}
	r := runBridge(t, e.dir, e.env(), "migrate")
	require.Zero(t, r.code, "%s", r)
	require.Contains(t, r.stdout, "binary log position table "+table+"_binlog")
	return e
}

// session is a connection of its own with a session variable set
// ("sql_log_bin = 0"), closed at the test's end.
func (e *binlogEnv) session(t *testing.T, set string) *sql.Conn {
	t.Helper()
	conn, err := e.db.Conn(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = conn.ExecContext(context.Background(), "SET SESSION "+set)
	require.NoError(t, err)
	return conn
}

// runReady starts a relay of the table with extra settings and its HTTP
// on a free port, and waits until /readyz answers 200 (the server sends
// from the position: rows come from the log from then on). It returns the
// relay and its HTTP address.
func (e *binlogEnv) runReady(t *testing.T, extra ...string) (*process, string) {
	t.Helper()
	http := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := start(t, e.dir, e.env(append(extra, "BRIDGE_HTTP_LISTEN="+http)...), "run")
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		code, _ := readyz(http)
		return code == 200
	}, "relay never ready")
	return p, http
}

func (e *binlogEnv) env(extra ...string) []string {
	return append([]string{
		"BRIDGE_SOURCE=mysql-binlog",
		"BRIDGE_DATABASE_URL=" + e.url,
		"BRIDGE_DATABASE_TABLE=" + e.table,
		"BRIDGE_NATS_URL=" + e.natsURL,
		"BRIDGE_HTTP_LISTEN=127.0.0.1:0",
		"BRIDGE_RELAY_INFLIGHT_TIMEOUT=3s",
		"BRIDGE_RELAY_ACK_DEADLINE=2s",
		"BRIDGE_RELAY_PUBLISH_TIMEOUT=1s",
		"BRIDGE_RELAY_BACKOFF_INITIAL=100ms",
		"BRIDGE_RELAY_BACKOFF_MAX=1s",
		"BRIDGE_SHUTDOWN_TIMEOUT=5s",
		"BRIDGE_LOG_LEVEL=warn",
	}, extra...)
}

func (e *binlogEnv) count(t *testing.T, status string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM `+e.table+` WHERE ? = '' OR status = ?`, status, status).Scan(&n))
	return n
}

// TestBinlogCommitOrderUnderSIGKILL: 8 producers commit 20,000 rows, 4 per
// transaction, each transaction waiting a random moment between its
// insert and its commit, so that commits come out of id order; meanwhile
// the relay is killed at 10 random moments. After the last relay caught
// up, every row is done and in the stream exactly once, each producer's
// rows in the order it committed them, and the stream's order is not the
// id order (it is the commit order).
func TestBinlogCommitOrderUnderSIGKILL(t *testing.T) {
	t.Parallel()
	e := newBinlogEnv(t)
	const producers, perProducer, perTx = 8, 2500, 4
	const total = producers * perProducer
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), uint64(time.Now().UnixNano())))
			for i := 0; i < perProducer; i += perTx {
				tx, err := e.db.Begin()
				if err != nil {
					t.Error(err)
					return
				}
				var values []string
				var args []any
				for j := i; j < i+perTx; j++ {
					values = append(values, "(?, 'events.binlog', ?)")
					args = append(args, fmt.Sprintf("p%d-%d", p, j), []byte(fmt.Sprintf("p%d %d", p, j)))
				}
				if _, err := tx.Exec(`INSERT INTO `+e.table+` (idempotency_key, subject, payload) VALUES `+strings.Join(values, ", "), args...); err != nil {
					t.Error(err)
					tx.Rollback()
					return
				}
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				if err := tx.Commit(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	produced := make(chan struct{})
	go func() { wg.Wait(); close(produced) }()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 29))
	// No periodic sweep: the rows must come from the binary log alone.
	small := []string{"BRIDGE_RELAY_MAX_IN_FLIGHT=300", "BRIDGE_BINLOG_SWEEP_INTERVAL=1h"}
	for i := range 10 {
		p := start(t, e.dir, e.env(small...), "run")
		target := min(e.count(t, "done")+1+rng.IntN(1500), total)
		deadline := time.Now().Add(time.Duration(200+rng.IntN(1500)) * time.Millisecond)
		poll(t, 60*time.Second, func() bool {
			require.False(t, p.exited(), "relay %d exited (%d)\nstderr:\n%s", i, p.code, p.stderr)
			return e.count(t, "done") >= target || time.Now().After(deadline)
		})
		kill(t, p)
	}
	<-produced
	require.False(t, t.Failed())
	t.Logf("after 10 kills: %d of %d rows done", e.count(t, "done"), total)
	final := start(t, e.dir, e.env("BRIDGE_BINLOG_SWEEP_INTERVAL=1h"), "run")
	poll(t, 120*time.Second, func() bool {
		require.False(t, final.exited(), "the relay exited (%d)\nstderr:\n%s", final.code, final.stderr)
		return e.count(t, "done") == total
	}, "not every row done")

	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	require.Equal(t, total, len(msgs), "the stream holds exactly one message per row")
	next := make([]int, producers)
	seen := map[string]bool{}
	inversions := 0
	lastID := int64(0)
	for _, m := range msgs {
		key := m.Headers().Get(jetstream.MsgIDHeader)
		require.False(t, seen[key], "message %s twice", key)
		seen[key] = true
		var p, n int
		_, err := fmt.Sscanf(string(m.Data()), "p%d %d", &p, &n)
		require.NoError(t, err)
		require.Equal(t, next[p], n, "producer %d: its rows in the order it committed them", p)
		next[p]++
		id, err := strconv.ParseInt(m.Headers().Get("Outbox-Id"), 10, 64)
		require.NoError(t, err)
		if id < lastID {
			inversions++
		}
		lastID = id
	}
	require.Positive(t, inversions, "commits came out of id order, and the stream has them in commit order")
	t.Logf("stream order differs from id order at %d places", inversions)
}

// TestBinlogOffRefused: on a server whose binary log is off, migrate and
// run refuse source: mysql-binlog with exit 2 and a message naming
// log_bin and how to turn it on.
func TestBinlogOffRefused(t *testing.T) {
	t.Parallel()
	url, table := bridgetest.MySQLTable(t)
	db, err := outbox.Open(context.Background(), url)
	require.NoError(t, err)
	defer db.Close()
	var logBin int
	require.NoError(t, db.SQL.QueryRow("SELECT @@log_bin").Scan(&logBin))
	if logBin != 0 {
		t.Fatalf("the server of %s runs with the binary log on: this test needs one with log_bin off (.ci/run uses the machine's server for it)", bridgetest.MySQLURLEnv)
	}
	dir := t.TempDir()
	env := []string{"BRIDGE_SOURCE=mysql-binlog", "BRIDGE_DATABASE_URL=" + url, "BRIDGE_DATABASE_TABLE=" + table,
		"BRIDGE_NATS_URL=nats://127.0.0.1:1", "BRIDGE_HTTP_LISTEN=127.0.0.1:0", "BRIDGE_LOG_LEVEL=warn"}
	for _, args := range [][]string{{"migrate"}, {"run"}} {
		r := runBridge(t, dir, env, args...)
		require.Equal(t, 2, r.code, "%s", r)
		require.Contains(t, r.stderr, "log_bin is OFF", "%s", r)
		require.Contains(t, r.stderr, "log-bin", "%s", r)
	}
}

// privateBinlogServer starts a MariaDB with the binary log on of the
// test's own (.ci/mariadb-binlog), for faults other tests must not see: a
// restart, a purge of the binary log. It returns its URL (database
// bridge_dev) and a function that restarts it (SIGKILL, then the same data
// on the same port).
func privateBinlogServer(t *testing.T) (url string, restart func()) {
	t.Helper()
	url, restart, _ = privateBinlogServerID(t, 1)
	return url, restart
}

// privateBinlogServerID is privateBinlogServer with server_id id (not 1:
// with log_slave_updates, to be made a replica); kill SIGKILLs it.
func privateBinlogServerID(t *testing.T, id int) (url string, restart, kill func()) {
	t.Helper()
	bridgetest.MySQLBinlogURL(t) // skipped (or failed under CI) like every binary log test
	script, err := filepath.Abs("../../.ci/mariadb-binlog")
	require.NoError(t, err)
	start := exec.Command(script, "start")
	start.Env = append(os.Environ(), fmt.Sprintf("MARIADB_SERVER_ID=%d", id))
	out, err := start.Output()
	require.NoError(t, err, "%s start: %s", script, out)
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		vars[k] = strings.Trim(v, "'")
	}
	dir := vars["BRIDGE_TEST_MYSQL_BINLOG_DIR"]
	t.Cleanup(func() { _ = exec.Command(script, "stop", dir).Run() })
	return vars["BRIDGE_TEST_MYSQL_BINLOG_URL"], func() {
			out, err := exec.Command(script, "restart", dir).CombinedOutput()
			require.NoError(t, err, "%s restart: %s", script, out)
		}, func() {
			out, err := exec.Command(script, "kill", dir).CombinedOutput()
			require.NoError(t, err, "%s kill: %s", script, out)
		}
}

// TestBinlogFailoverToAReplicaGoesOnFromTheGTIDSet: the relay reads a
// primary whose replica (log_slave_updates) applies everything under the
// same GTIDs, the bridge table and its position table included. The
// primary is killed; the replica is promoted and the relay pointed at it:
// it goes on from the stored GTID set (the primary's file and offset mean
// nothing there). Every row committed on either is published once, in
// commit order.
func TestBinlogFailoverToAReplicaGoesOnFromTheGTIDSet(t *testing.T) {
	t.Parallel()
	primaryURL, _, killPrimary := privateBinlogServerID(t, 1)
	replicaURL, _, _ := privateBinlogServerID(t, 2)
	primary, err := outbox.Open(context.Background(), primaryURL)
	require.NoError(t, err)
	t.Cleanup(func() { primary.Close() })
	replica, err := outbox.Open(context.Background(), replicaURL)
	require.NoError(t, err)
	t.Cleanup(func() { replica.Close() })
	primaryPort := primaryURL[strings.LastIndex(primaryURL, ":")+1 : strings.LastIndex(primaryURL, "/")]
	_, err = replica.SQL.Exec("CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = " + primaryPort + ", MASTER_USER = 'root', MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos")
	require.NoError(t, err)
	_, err = replica.SQL.Exec("START SLAVE")
	require.NoError(t, err)

	n := bridgetest.StartNATS(t)
	js := natsClient(t, n.URL())
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: 2 * time.Minute})
	require.NoError(t, err)
	e := &binlogEnv{url: primaryURL, table: "outbox", db: primary.SQL, natsURL: n.URL(), js: js, dir: t.TempDir()}
	r := runBridge(t, e.dir, e.env(), "migrate")
	require.Zero(t, r.code, "%s", r)
	insert := func(db *sql.DB, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			_, err := db.Exec(`INSERT INTO outbox (idempotency_key, subject, payload) VALUES (?, 'events.failover', ?)`, fmt.Sprintf("k-%d", i), []byte(strconv.Itoa(i)))
			require.NoError(t, err)
		}
	}
	countDone := func(db *sql.DB) int {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM outbox WHERE status = 'done'`).Scan(&n))
		return n
	}
	p := start(t, e.dir, e.env(), "run")
	insert(primary.SQL, 0, 300)
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		return countDone(primary.SQL) == 300
	}, "the relay on the primary did not relay")
	// The replica has applied everything (asynchronous replication: what
	// it had not would be lost with the primary, as in any failover).
	var want string
	require.NoError(t, primary.SQL.QueryRow("SELECT @@gtid_binlog_pos").Scan(&want))
	poll(t, 30*time.Second, func() bool {
		var got string
		require.NoError(t, replica.SQL.QueryRow("SELECT @@gtid_slave_pos").Scan(&got))
		return got == want
	}, "the replica never caught up with %s", want)
	var storedFile string
	require.NoError(t, replica.SQL.QueryRow(`SELECT file FROM outbox_binlog`).Scan(&storedFile))

	killPrimary()
	kill(t, p)
	_, err = replica.SQL.Exec("STOP SLAVE")
	require.NoError(t, err)
	_, err = replica.SQL.Exec("RESET SLAVE ALL")
	require.NoError(t, err)
	e.url, e.db = replicaURL, replica.SQL
	p = start(t, e.dir, e.env("BRIDGE_LOG_LEVEL=info"), "run")
	insert(replica.SQL, 300, 600)
	poll(t, 60*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		return countDone(replica.SQL) == 600
	}, "the relay on the promoted replica did not go on")
	require.Contains(t, p.stderr.String(), `"from":"gtid `, "it starts from the GTID set")
	// Restarted on the promoted replica, whose writes have server_id 2 in
	// the domain the primary's had 1: it starts from the position it
	// stored there (MariaDB refused a set with a GTID of each, error
	// 1943, and the relay read nothing again).
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.wait(t, 30*time.Second)
	p = start(t, e.dir, e.env("BRIDGE_LOG_LEVEL=info"), "run")
	insert(replica.SQL, 600, 700)
	poll(t, 60*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		return countDone(replica.SQL) == 700
	}, "the relay restarted on the promoted replica did not go on: %s", p.stderr)
	msgs := bridgetest.Messages(t, js, "EVENTS")
	require.Equal(t, 700, len(msgs), "the stream holds exactly one message per row")
	for i, m := range msgs {
		require.Equal(t, strconv.Itoa(i), string(m.Data()), "stream position %d: commit order", i)
	}
	t.Logf("stored file on the primary's side: %s", storedFile)
}

// TestBinlogFaultsNamedAndNothingLost: while a producer keeps committing,
// NATS goes away for 10 s, then MariaDB is killed and started again; then
// the relay is stopped, rows are committed and the binary log holding its
// position is purged before it starts again. Each fault is named on
// /readyz while it lasts; at the end every row is done and in the stream
// exactly once, each key's rows in commit order.
func TestBinlogFaultsNamedAndNothingLost(t *testing.T) {
	t.Parallel()
	url, restartDB := privateBinlogServer(t)
	n := bridgetest.StartNATS(t)
	db, err := outbox.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	js := natsClient(t, n.URL())
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: 2 * time.Minute})
	require.NoError(t, err)
	e := &binlogEnv{url: url, table: "outbox", db: db.SQL, natsURL: n.URL(), js: js, dir: t.TempDir()}
	r := runBridge(t, e.dir, e.env(), "migrate")
	require.Zero(t, r.code, "%s", r)
	http := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	relayEnv := e.env("BRIDGE_HTTP_LISTEN="+http, "BRIDGE_BINLOG_SWEEP_INTERVAL=1h", "BRIDGE_LOG_LEVEL=info")

	// The producer: one row per transaction, keys k-0, k-1, …; a failed
	// commit (the server away) is tried again under the same key.
	var produced atomic.Int64
	stop := make(chan struct{})
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for i := 0; ; {
			select {
			case <-stop:
				return
			default:
			}
			_, err := e.db.Exec(`INSERT IGNORE INTO outbox (idempotency_key, subject, payload, ordering_key) VALUES (?, 'events.faults', ?, ?)`,
				fmt.Sprintf("k-%d", i), []byte(strconv.Itoa(i)), fmt.Sprintf("key-%d", i%7))
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			i++
			produced.Store(int64(i))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	ready := func(p *process) {
		t.Helper()
		poll(t, 60*time.Second, func() bool {
			require.False(t, p.exited(), "relay exited (%d):\n%s", p.code, p.stderr)
			code, _ := readyz(http)
			return code == 200
		}, "relay never ready")
	}
	unready := func(p *process, names string) {
		t.Helper()
		poll(t, 30*time.Second, func() bool {
			require.False(t, p.exited(), "relay exited (%d):\n%s", p.code, p.stderr)
			code, body := readyz(http)
			return code == 503 && strings.Contains(body, names)
		}, "/readyz never named %q", names)
	}
	p := start(t, e.dir, relayEnv, "run")
	ready(p)
	waitDone := func(min int) {
		t.Helper()
		poll(t, 60*time.Second, func() bool {
			require.False(t, p.exited(), "relay exited (%d):\n%s", p.code, p.stderr)
			return e.countDone(t) >= min
		}, "fewer than %d rows done", min)
	}
	waitDone(200)

	// NATS away for 10 s.
	n.Stop()
	unready(p, "nats")
	time.Sleep(10 * time.Second)
	n.Restart(t)
	ready(p)
	waitDone(int(produced.Load()))

	// MariaDB killed and started again.
	restartDB()
	ready(p)
	waitDone(int(produced.Load()))

	// The relay stopped; rows committed; the binary log holding its
	// position purged.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.wait(t, 30*time.Second)
	before := int(produced.Load())
	poll(t, 10*time.Second, func() bool { return int(produced.Load()) >= before+300 }, "the producer stopped")
	// The server keeps a file a replication connection reads: wait for the
	// stopped relay's to end.
	poll(t, 30*time.Second, func() bool {
		var dumps int
		require.NoError(t, e.db.QueryRow("SELECT count(*) FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'").Scan(&dumps))
		return dumps == 0
	}, "the stopped relay's replication connection is still open")
	_, err = e.db.Exec("FLUSH BINARY LOGS")
	require.NoError(t, err)
	var file, pos, doDB, ignoreDB string
	require.NoError(t, e.db.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &doDB, &ignoreDB))
	// MariaDB keeps a file until its binlog checkpoint (InnoDB having
	// flushed the transactions it holds) has passed it: purged again until
	// it is gone.
	poll(t, 30*time.Second, func() bool {
		_, err := e.db.Exec("PURGE BINARY LOGS TO '" + file + "'")
		require.NoError(t, err)
		rows, err := e.db.Query("SHOW BINARY LOGS")
		require.NoError(t, err)
		defer rows.Close()
		logs := 0
		for rows.Next() {
			logs++
		}
		require.NoError(t, rows.Err())
		return logs == 1
	}, "the binary log files before %s are never purged", file)
	p = start(t, e.dir, relayEnv, "run")
	poll(t, 60*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited (%d):\n%s", p.code, p.stderr)
		_, body := readyz(http)
		return strings.Contains(body, "purged")
	}, "/readyz never named the purged position")
	close(stop)
	<-producerDone
	total := int(produced.Load())
	waitDone(total)

	require.Equal(t, total, e.count(t, ""), "one row per key")
	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	require.Equal(t, total, len(msgs), "the stream holds exactly one message per row")
	last := map[string]int{}
	for _, m := range msgs {
		i, err := strconv.Atoi(string(m.Data()))
		require.NoError(t, err)
		key := m.Headers().Get("Outbox-Idempotency-Key")
		require.Equal(t, fmt.Sprintf("k-%d", i), key)
		ok := fmt.Sprintf("key-%d", i%7)
		if prev, seen := last[ok]; seen {
			require.Greater(t, i, prev, "ordering key %s: its rows in commit order", ok)
		}
		last[ok] = i
	}

	// Idle, the relay and one of another table alone on their server:
	// neither writes, though each position stored is a transaction of the
	// log both read (before, each write brought the next: one a second for
	// ever, and the two relays' writes each other's).
	e2 := &binlogEnv{url: url, table: "outbox2", db: db.SQL, natsURL: n.URL(), js: js, dir: t.TempDir()}
	r = runBridge(t, e2.dir, e2.env(), "migrate")
	require.Zero(t, r.code, "%s", r)
	http2 := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p2 := start(t, e2.dir, e2.env("BRIDGE_HTTP_LISTEN="+http2, "BRIDGE_BINLOG_SWEEP_INTERVAL=1h"), "run")
	poll(t, 30*time.Second, func() bool {
		require.False(t, p2.exited(), "relay exited (%d):\n%s", p2.code, p2.stderr)
		code, _ := readyz(http2)
		return code == 200
	}, "the second relay never ready")
	stored := func() string {
		var at, at2 string
		require.NoError(t, e.db.QueryRow(`SELECT updated_at FROM outbox_binlog`).Scan(&at))
		require.NoError(t, e.db.QueryRow(`SELECT updated_at FROM outbox2_binlog`).Scan(&at2))
		return at + " " + at2
	}
	// Settled first: the second relay's first sweep asks for its position.
	idleFrom := stored()
	poll(t, 20*time.Second, func() bool {
		time.Sleep(1500 * time.Millisecond)
		now := stored()
		defer func() { idleFrom = now }()
		return now == idleFrom
	}, "the relays never stopped storing their positions")
	time.Sleep(4 * time.Second)
	require.Equal(t, idleFrom, stored(), "an idle relay stored its position again")
	require.Contains(t, p.stderr.String(), "purged")
}

func (e *binlogEnv) countDone(t *testing.T) int { return e.count(t, "done") }

// TestBinlogStandbyTakesOver: a second relay of the table waits as a
// standby (ready, /readyz naming the holder of the lock, said once in the
// log); when the first is killed it takes over from the stored position,
// and every row ends in the stream once, in commit order.
func TestBinlogStandbyTakesOver(t *testing.T) {
	t.Parallel()
	e := newBinlogEnv(t)
	insert := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			_, err := e.db.Exec(`INSERT INTO `+e.table+` (idempotency_key, subject, payload) VALUES (?, 'events.standby', ?)`, fmt.Sprintf("k-%d", i), []byte(strconv.Itoa(i)))
			require.NoError(t, err)
		}
	}
	r := runBridge(t, e.dir, e.env(), "status")
	require.Zero(t, r.code, "%s", r)
	require.Contains(t, r.stdout, "read by:         no relay holds the table's lock now", "bridge status before any relay:\n%s", r.stdout)
	a := start(t, e.dir, e.env(), "run")
	insert(0, 100)
	poll(t, 30*time.Second, func() bool { return e.countDone(t) == 100 }, "the first relay did not relay")
	r = runBridge(t, e.dir, e.env(), "status", "--json")
	require.Zero(t, r.code, "%s", r)
	var doc struct {
		BinaryLog struct {
			Reader         string `json:"reader"`
			StoredPosition string `json:"stored_position"`
			StoredFileKept bool   `json:"stored_file_kept"`
		} `json:"binary_log"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), "%s", r.stdout)
	require.Contains(t, doc.BinaryLog.Reader, "connection ", "bridge status --json names the relay's session: %s", r.stdout)
	require.NotEmpty(t, doc.BinaryLog.StoredPosition, "%s", r.stdout)
	require.True(t, doc.BinaryLog.StoredFileKept, "%s", r.stdout)

	b := start(t, e.dir, e.env("BRIDGE_LOG_LEVEL=info"), "run")
	addr := relayHTTPAddr(t, b)
	poll(t, 30*time.Second, func() bool {
		return strings.Contains(b.stderr.String(), "standby: another relay reads the binary log")
	}, "the second relay never said it waits")
	code, body := httpGet("http://" + addr + "/readyz")
	require.Equal(t, 200, code, "a standby is ready: %s", body)
	require.Contains(t, body, "standby", "/readyz says it waits: %s", body)
	require.Contains(t, body, "connection ", "/readyz names the holder: %s", body)

	kill(t, a)
	insert(100, 1000)
	poll(t, 60*time.Second, func() bool {
		require.False(t, b.exited(), "the standby exited:\n%s", b.stderr)
		return e.countDone(t) == 1000
	}, "the standby did not take over")
	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	require.Equal(t, 1000, len(msgs), "the stream holds exactly one message per row")
	for i, m := range msgs {
		require.Equal(t, strconv.Itoa(i), string(m.Data()), "stream position %d: commit order", i)
	}
	require.Equal(t, 1, strings.Count(b.stderr.String(), "standby: another relay reads the binary log"), "said once")
}

// binlogStatuses is each row's status, by idempotency key.
func (e *binlogEnv) statuses(t *testing.T) map[string]string {
	t.Helper()
	rows, err := e.db.Query(`SELECT idempotency_key, status FROM ` + e.table)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, st string
		require.NoError(t, rows.Scan(&k, &st))
		out[k] = st
	}
	require.NoError(t, rows.Err())
	return out
}

// TestBinlogBadRowsStayWithTheirRows: a row with headers that are not a
// JSON object becomes a dead letter at once; a row whose subject no stream
// captures is set aside (failed), and the later row of its ordering key
// waits behind it, while the rows of other keys go on; once a stream
// captures the subject, the sweep publishes both, in order.
func TestBinlogBadRowsStayWithTheirRows(t *testing.T) {
	t.Parallel()
	e := newBinlogEnv(t)
	p, _ := e.runReady(t, "BRIDGE_BINLOG_SWEEP_INTERVAL=1s", "BRIDGE_RELAY_MAX_ATTEMPTS=1000")
	ins := func(key, subject, headers, okey string) {
		t.Helper()
		var ok any
		if okey != "" {
			ok = okey
		}
		_, err := e.db.Exec(`INSERT INTO `+e.table+` (idempotency_key, subject, payload, headers, ordering_key) VALUES (?, ?, ?, ?, ?)`,
			key, subject, []byte(key), headers, ok)
		require.NoError(t, err)
	}
	ins("a-1", "events.ok", "{}", "a")
	ins("bad-headers", "events.ok", `["not", "an", "object"]`, "")
	ins("x-1", "other.x", "{}", "x") // no stream captures other.>
	ins("a-2", "events.ok", "{}", "a")
	ins("x-2", "other.x", "{}", "x")
	ins("a-3", "events.ok", "{}", "a")
	// Rows of one key in one transaction: the first has no stream; the
	// two after it, which have one, wait behind it.
	_, err := e.db.Exec(`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload, ordering_key) VALUES
		('z-1', 'other.z', 'z-1', 'z'), ('z-2', 'events.z', 'z-2', 'z'), ('z-3', 'events.z', 'z-3', 'z')`)
	require.NoError(t, err)
	want := map[string]string{"a-1": "done", "a-2": "done", "a-3": "done", "bad-headers": "permanent_failed", "x-1": "failed", "x-2": "failed",
		"z-1": "failed", "z-2": "failed", "z-3": "failed"}
	var got map[string]string
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		got = e.statuses(t)
		return fmt.Sprint(got) == fmt.Sprint(want)
	}, "the rows of key a relayed, the dead letter and the rows of key x set aside: %v", &got)

	// The dead letter, its headers mended, sent again: the log holds
	// nothing new for it, the sweep takes it, as bridge retry says.
	_, err = e.db.Exec(`UPDATE ` + e.table + ` SET headers = '{}' WHERE idempotency_key = 'bad-headers'`)
	require.NoError(t, err)
	var dead int64
	require.NoError(t, e.db.QueryRow(`SELECT id FROM `+e.table+` WHERE idempotency_key = 'bad-headers'`).Scan(&dead))
	r := runBridge(t, e.dir, e.env("BRIDGE_BINLOG_SWEEP_INTERVAL=1s"), "retry", "--id", strconv.FormatInt(dead, 10))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "1 dead letter back to pending, 0 failed rows due now (the relay's next sweep sends them: binlog.sweep_interval, 1s in this configuration)")
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		return e.statuses(t)["bad-headers"] == "done"
	}, "the retried dead letter was never published")

	_, err = e.js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other.>"}})
	require.NoError(t, err)
	poll(t, 60*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		got = e.statuses(t)
		return got["x-1"] == "done" && got["x-2"] == "done" && got["z-3"] == "done"
	}, "the rows set aside were never published: %v", &got)
	var other, events []string
	for _, m := range bridgetest.Messages(t, e.js, "OTHER") {
		other = append(other, string(m.Data()))
	}
	for _, m := range bridgetest.Messages(t, e.js, "EVENTS") {
		events = append(events, string(m.Data()))
	}
	require.ElementsMatch(t, []string{"x-1", "x-2", "z-1"}, other)
	require.Less(t, slices.Index(other, "x-1"), slices.Index(other, "x-2"), "key x in order: %v", other)
	require.Contains(t, events, "bad-headers")
	events = slices.DeleteFunc(events, func(k string) bool { return k == "bad-headers" })
	require.Equal(t, []string{"a-1", "a-2", "a-3", "z-2", "z-3"}, events, "key z's later rows after z-1 was published, in order")
}

// TestBinlogNoDuplicateAfterLateRestart: six rounds of a relay SIGKILLed
// while a producer commits rows, each followed by a pause longer than the
// stream's duplicate window (5 s) before the next relay starts. A new
// relay reads again from the stored position, which lags what the killed
// one published; JetStream's duplicate window no longer drops the
// repeats. Every row is in the stream exactly once and done: the rows
// marked done are skipped, the ones published and not yet marked are
// found in the stream (Config.Reconciler).
func TestBinlogNoDuplicateAfterLateRestart(t *testing.T) {
	t.Parallel()
	const window = 5 * time.Second
	e := newBinlogEnvWindow(t, window)
	const rounds, perRound = 6, 1500
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 29))
	small := []string{"BRIDGE_RELAY_MAX_IN_FLIGHT=300", "BRIDGE_BINLOG_SWEEP_INTERVAL=1h", "BRIDGE_LOG_LEVEL=info"}
	insert := func(from, to int) {
		var values []string
		var args []any
		for n := from; n < to; n++ {
			values = append(values, "(?, 'events.late', ?)")
			args = append(args, fmt.Sprintf("k-%d", n), []byte(strconv.Itoa(n)))
		}
		_, err := e.db.Exec(`INSERT INTO `+e.table+` (idempotency_key, subject, payload) VALUES `+strings.Join(values, ", "), args...)
		require.NoError(t, err)
	}
	reconciled := 0
	for i := range rounds {
		p := start(t, e.dir, e.env(small...), "run")
		produced := make(chan struct{})
		go func() {
			defer close(produced)
			for n := i * perRound; n < (i+1)*perRound; n += 50 {
				insert(n, n+50)
				time.Sleep(3 * time.Millisecond) // paced: the kills land among the commits
			}
		}()
		target := min(e.countDone(t)+200+rng.IntN(perRound), (i+1)*perRound)
		poll(t, 60*time.Second, func() bool {
			require.False(t, p.exited(), "relay %d exited (%d)\nstderr:\n%s", i, p.code, p.stderr)
			return e.countDone(t) >= target
		})
		kill(t, p)
		<-produced
		reconciled += strings.Count(p.stderr.String(), "rows read again reconciled against their streams")
		time.Sleep(window + time.Second) // every id the killed relay published leaves the window
	}
	total := rounds * perRound
	final := start(t, e.dir, e.env("BRIDGE_BINLOG_SWEEP_INTERVAL=1h"), "run")
	poll(t, 120*time.Second, func() bool {
		require.False(t, final.exited(), "the relay exited (%d)\nstderr:\n%s", final.code, final.stderr)
		return e.countDone(t) == total
	}, "not every row done")
	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	require.Equal(t, total, len(msgs), "the stream holds exactly one message per row")
	for i, m := range msgs {
		require.Equal(t, strconv.Itoa(i), string(m.Data()), "stream position %d: commit order", i)
	}
	t.Logf("reconcile lines of the killed relays: %d", reconciled)
}

// TestBinlogWithoutReplicationGrantsRefused: a user without REPLICATION
// SLAVE and REPLICATION CLIENT gets exit 2 from migrate and run, the
// message naming both grants and the statement that gives them, without
// the user's password.
func TestBinlogWithoutReplicationGrantsRefused(t *testing.T) {
	t.Parallel()
	url, table := bridgetest.MySQLBinlogTable(t)
	db, err := outbox.Open(context.Background(), url)
	require.NoError(t, err)
	defer db.Close()
	user := "u_" + strings.ReplaceAll(strings.TrimSuffix(table, ".outbox"), "t_", "")
	const password = "s3cret-pw"
	_, err = db.SQL.Exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.SQL.Exec("DROP USER '" + user + "'@'%'") })
	_, err = db.SQL.Exec("GRANT ALL PRIVILEGES ON " + strings.TrimSuffix(table, ".outbox") + ".* TO '" + user + "'@'%'")
	require.NoError(t, err)
	host := strings.TrimPrefix(url, "mysql://")
	host = host[strings.Index(host, "@")+1:]
	host = host[:strings.Index(host, "/")]
	userURL := "mysql://" + user + ":" + password + "@" + host + "/" + strings.TrimSuffix(table, ".outbox")
	env := []string{"BRIDGE_SOURCE=mysql-binlog", "BRIDGE_DATABASE_URL=" + userURL, "BRIDGE_DATABASE_TABLE=" + table,
		"BRIDGE_NATS_URL=nats://127.0.0.1:1", "BRIDGE_HTTP_LISTEN=127.0.0.1:0", "BRIDGE_LOG_LEVEL=warn"}
	dir := t.TempDir()
	for _, args := range [][]string{{"migrate"}, {"run"}} {
		r := runBridge(t, dir, env, args...)
		require.Equal(t, 2, r.code, "%s", r)
		require.Contains(t, r.stderr, "REPLICATION SLAVE and REPLICATION CLIENT", "%s", r)
		require.Contains(t, r.stderr, "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO", "%s", r)
		require.NotContains(t, r.stderr+r.stdout, password, "no secret printed")
	}
}

// TestBinlogPublishesRowsAsCommitted: a row its transaction updated after
// inserting it is published as committed; a column moved by ALTER TABLE
// while the relay reads is read by name; after a TRUNCATE while the relay
// was stopped, the log's old inserts whose ids were taken again are not
// published in place of the new rows, which are published from their own
// inserts.
func TestBinlogPublishesRowsAsCommitted(t *testing.T) {
	t.Parallel()
	e := newBinlogEnv(t)
	http := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := e.env("BRIDGE_HTTP_LISTEN="+http, "BRIDGE_BINLOG_SWEEP_INTERVAL=1h")
	p := start(t, e.dir, env, "run")
	ready := func() {
		t.Helper()
		poll(t, 30*time.Second, func() bool {
			require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
			code, _ := readyz(http)
			return code == 200
		}, "relay never ready")
	}
	ready()
	tx, err := e.db.Begin()
	require.NoError(t, err)
	_, err = tx.Exec(`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload) VALUES ('u-1', 'events.draft', 'draft')`)
	require.NoError(t, err)
	_, err = tx.Exec(`UPDATE ` + e.table + ` SET subject = 'events.final', payload = 'final', headers = JSON_OBJECT('X-Id', CAST(LAST_INSERT_ID() AS CHAR)) WHERE idempotency_key = 'u-1'`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	// Savepoints inside a transaction (Django's atomic blocks nest with
	// them): the rows rolled back to one are not in the log; the others
	// are published, the transaction ending only at its COMMIT.
	tx, err = e.db.Begin()
	require.NoError(t, err)
	for _, stmt := range []string{
		`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload) VALUES ('sp-1', 'events.sp', 'sp-1')`,
		`SAVEPOINT a`,
		`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload) VALUES ('sp-2', 'events.sp', 'sp-2')`,
		`ROLLBACK TO SAVEPOINT a`,
		`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload) VALUES ('sp-3', 'events.sp', 'sp-3')`,
	} {
		_, err = tx.Exec(stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, tx.Commit())
	_, err = e.db.Exec(`ALTER TABLE ` + e.table + ` MODIFY subject TEXT NOT NULL AFTER payload`)
	require.NoError(t, err)
	_, err = e.db.Exec(`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload) VALUES ('swap-1', 'events.swap', 'swap')`)
	require.NoError(t, err)
	poll(t, 30*time.Second, func() bool { return e.countDone(t) == 4 }, "the rows were not relayed")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.wait(t, 30*time.Second)
	_, err = e.db.Exec(`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload) VALUES ('old-1', 'events.old', 'old-1'), ('old-2', 'events.old', 'old-2')`)
	require.NoError(t, err)
	_, err = e.db.Exec(`TRUNCATE ` + e.table)
	require.NoError(t, err)
	_, err = e.db.Exec(`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload) VALUES ('new-1', 'events.new', 'new-1'), ('new-2', 'events.new', 'new-2')`)
	require.NoError(t, err)
	p = start(t, e.dir, env, "run")
	ready()
	poll(t, 30*time.Second, func() bool { return e.countDone(t) == 2 }, "the new rows were not relayed")

	var got []string
	for _, m := range bridgetest.Messages(t, e.js, "EVENTS") {
		got = append(got, m.Subject()+" "+string(m.Data())+" "+m.Headers().Get("X-Id"))
	}
	require.Equal(t, []string{"events.final final 1", "events.sp sp-1 ", "events.sp sp-3 ", "events.swap swap ", "events.new new-1 ", "events.new new-2 "}, got)
}

// TestBinlogRelayWithDMLGrants: a DBA applies bridge migrate --print (the
// bridge table and its <table>_binlog); a relay whose user holds the
// replication grants and DML on the schema, no CREATE, starts, stores its
// first position and relays. MySQL refuses CREATE TABLE IF NOT EXISTS
// without the CREATE privilege even where the table exists (error 1142).
func TestBinlogRelayWithDMLGrants(t *testing.T) {
	t.Parallel()
	url, table := bridgetest.MySQLBinlogTable(t)
	schema := strings.TrimSuffix(table, ".outbox")
	db, err := outbox.Open(context.Background(), url)
	require.NoError(t, err)
	defer db.Close()
	dir := t.TempDir()
	r := runBridge(t, dir, []string{"BRIDGE_SOURCE=mysql-binlog", "BRIDGE_DATABASE_URL=" + url, "BRIDGE_DATABASE_TABLE=" + table}, "migrate", "--print")
	require.Zero(t, r.code, "%s", r)
	require.Contains(t, r.stdout, "CREATE TABLE IF NOT EXISTS "+table+"_binlog")
	var script []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if !strings.HasPrefix(l, "--") {
			script = append(script, l)
		}
	}
	for _, stmt := range strings.Split(strings.Join(script, "\n"), ";\n") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			_, err := db.SQL.Exec(stmt)
			require.NoError(t, err, stmt)
		}
	}

	user := "dml_" + strings.TrimPrefix(schema, "t_")
	const password = "dml-pw"
	_, err = db.SQL.Exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.SQL.Exec("DROP USER '" + user + "'@'%'") })
	for _, grant := range []string{"SELECT, INSERT, UPDATE, DELETE ON " + schema + ".*", "REPLICATION SLAVE, REPLICATION CLIENT ON *.*"} {
		_, err = db.SQL.Exec("GRANT " + grant + " TO '" + user + "'@'%'")
		require.NoError(t, err)
	}
	host := strings.TrimPrefix(url, "mysql://")
	host = host[strings.Index(host, "@")+1:]
	host = host[:strings.Index(host, "/")]

	n := bridgetest.StartNATS(t)
	js := natsClient(t, n.URL())
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}})
	require.NoError(t, err)
	http := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := start(t, dir, []string{"BRIDGE_SOURCE=mysql-binlog", "BRIDGE_DATABASE_URL=mysql://" + user + ":" + password + "@" + host + "/" + schema,
		"BRIDGE_DATABASE_TABLE=" + table, "BRIDGE_NATS_URL=" + n.URL(), "BRIDGE_HTTP_LISTEN=" + http, "BRIDGE_LOG_LEVEL=warn"}, "run")
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		code, _ := readyz(http)
		return code == 200
	}, "relay never ready")
	_, err = db.SQL.Exec(`INSERT INTO ` + table + ` (idempotency_key, subject, payload) VALUES ('g-1', 'events.g', 'g-1'), ('g-2', 'events.g', 'g-2')`)
	require.NoError(t, err)
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		var done int
		require.NoError(t, db.SQL.QueryRow(`SELECT COUNT(*) FROM `+table+` WHERE status = 'done'`).Scan(&done))
		return done == 2
	}, "rows never relayed")
	var stored int
	require.NoError(t, db.SQL.QueryRow(`SELECT COUNT(*) FROM `+table+`_binlog`).Scan(&stored))
	require.Equal(t, 1, stored, "the relay stores its position in the table the DBA made")
	require.NotContains(t, p.stderr.String(), password)
}

// TestBinlogStreamLeaderLost: the relay publishes rows read from the
// binary log to an R3 stream whose leader is stopped while a producer
// commits, then started again; then the stream loses its quorum (two of
// three servers stopped) for 20 s. Publishes fail meanwhile: a fault of
// the destination, not of the rows, so none is set aside or dead (three
// attempts would make one), /readyz answers 503 naming the stream while
// the quorum is lost, and every row is in the stream once, in commit
// order (one producer: id order).
func TestBinlogStreamLeaderLost(t *testing.T) {
	t.Parallel()
	c := bridgetest.StartCluster(t)
	url, table := bridgetest.MySQLBinlogTable(t)
	db, err := outbox.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	js := natsClient(t, c.URLs())
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, Replicas: 3, Duplicates: 2 * time.Minute})
	require.NoError(t, err)
	e := &binlogEnv{url: url, table: table, db: db.SQL, natsURL: c.URLs(), js: js, dir: t.TempDir()}
	r := runBridge(t, e.dir, e.env(), "migrate")
	require.Zero(t, r.code, "%s", r)
	p, addr := e.runReady(t, "BRIDGE_RELAY_MAX_ATTEMPTS=3", "BRIDGE_BINLOG_SWEEP_INTERVAL=1h")

	var produced atomic.Int64
	stop, producing := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(producing)
		for n := 0; ; n += 10 {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var values []string
			var args []any
			for i := n; i < n+10; i++ {
				values = append(values, "(?, 'events.leader', ?, ?)")
				args = append(args, fmt.Sprintf("k-%d", i), []byte(strconv.Itoa(i)), fmt.Sprintf("key-%d", i%5))
			}
			if _, err := e.db.Exec(`INSERT INTO `+e.table+` (idempotency_key, subject, payload, ordering_key) VALUES `+strings.Join(values, ", "), args...); err != nil {
				t.Errorf("insert: %v", err)
				return
			}
			produced.Store(int64(n + 10))
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-producing
	})
	progress := func(what string) {
		t.Helper()
		at := e.countDone(t)
		poll(t, 90*time.Second, func() bool {
			require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
			return e.countDone(t) >= at+200
		}, "no progress after: %s", what)
	}
	progress("start")
	leaderOf := func() string {
		var leader string
		poll(t, 60*time.Second, func() bool {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			s, err := js.Stream(cctx, "EVENTS")
			if err == nil && s.CachedInfo().Cluster != nil {
				leader = s.CachedInfo().Cluster.Leader
			}
			return leader != ""
		}, "EVENTS has no leader")
		return leader
	}
	leader := leaderOf()
	c.Stop(t, leader)
	progress("leader " + leader + " stopped")
	c.Restart(t, leader)
	progress("leader " + leader + " started again")

	// The quorum lost: another server stopped first and the leader last
	// (the other way round, the two left elect one of themselves between
	// the stops; see TestClusterQuorumLost).
	leader = leaderOf()
	down := []string{"n1", leader}
	if leader == "n1" {
		down[0] = "n2"
	}
	for _, n := range down {
		c.Stop(t, n)
	}
	lost := time.Now()
	for time.Since(lost) < 20*time.Second {
		if time.Since(lost) >= 10*time.Second {
			code, body := readyz(addr)
			require.Equal(t, 503, code, "/readyz %s into the loss of quorum: %s", time.Since(lost).Round(time.Second), body)
			require.Contains(t, body, "stream EVENTS", "/readyz names the stream: %s", body)
		}
		require.Zero(t, e.count(t, "permanent_failed"), "no dead letter while the broker is out")
		time.Sleep(500 * time.Millisecond)
	}
	for _, n := range down {
		c.Restart(t, n)
	}
	progress("quorum back")
	close(stop)
	<-producing
	total := int(produced.Load())
	poll(t, 60*time.Second, func() bool { return e.countDone(t) == total }, "not every row relayed")

	require.Zero(t, e.count(t, "failed")+e.count(t, "permanent_failed"), "a row set aside or dead for the destination's fault")
	msgs := bridgetest.Messages(t, js, "EVENTS")
	require.Len(t, msgs, total, "the stream holds exactly one message per row")
	for i, m := range msgs {
		require.Equal(t, strconv.Itoa(i), string(m.Data()), "stream position %d: commit order", i)
	}
}

// TestBinlogRowItsConstraintRefusesToMark: a row inserted while the
// session skipped CHECK constraints (headers that are not JSON) is a dead
// letter that cannot be marked: any update of it is checked. It stays
// pending, named on /readyz (degraded), and the rows of its transaction
// and after it are relayed (before, the marker retried the batch for
// ever and everything after waited, every probe green). Mended, the next
// sweep publishes it.
func TestBinlogRowItsConstraintRefusesToMark(t *testing.T) {
	t.Parallel()
	e := newBinlogEnv(t)
	p, http := e.runReady(t, "BRIDGE_BINLOG_SWEEP_INTERVAL=1s")
	ctx := context.Background()
	conn := e.session(t, "check_constraint_checks = 0")
	_, err := conn.ExecContext(ctx, `INSERT INTO `+e.table+` (idempotency_key, subject, payload, headers) VALUES
		('c-1', 'events.c', 'c-1', '{}'), ('c-bad', 'events.c', 'c-bad', 'not json'), ('c-2', 'events.c', 'c-2', '{}')`)
	require.NoError(t, err)
	_, err = e.db.Exec(`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload) VALUES ('c-3', 'events.c', 'c-3')`)
	require.NoError(t, err)
	var got map[string]string
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		got = e.statuses(t)
		return got["c-1"] == "done" && got["c-2"] == "done" && got["c-3"] == "done"
	}, "the rows beside and after the unmarkable one were not relayed: %v", &got)
	require.Equal(t, "pending", got["c-bad"])
	poll(t, 10*time.Second, func() bool {
		code, body := readyz(http)
		return code == 200 && strings.Contains(body, "cannot be marked")
	}, "/readyz never named the row that cannot be marked")

	_, err = e.db.Exec(`UPDATE ` + e.table + ` SET headers = '{}' WHERE idempotency_key = 'c-bad'`)
	require.NoError(t, err)
	poll(t, 30*time.Second, func() bool { return e.statuses(t)["c-bad"] == "done" }, "the mended row was never published")
	poll(t, 30*time.Second, func() bool {
		_, body := readyz(http)
		return !strings.Contains(body, "cannot be marked")
	}, "/readyz still names the mended row")
	var events []string
	for _, m := range bridgetest.Messages(t, e.js, "EVENTS") {
		events = append(events, string(m.Data()))
	}
	require.Equal(t, []string{"c-1", "c-2", "c-3", "c-bad"}, events)
	require.NotContains(t, p.stderr.String(), "committed while the relay read the binary log", "the row the log brought, its mark refused, is not one the log missed")
}

// TestBinlogLargeTransactionPublishedAsCommitted: a transaction of more
// rows than a batch is read in parts; an UPDATE of a row of an earlier
// part by the same transaction is published too (before, that row went
// out as inserted), as is one of the last part, and every row once, in
// order.
func TestBinlogLargeTransactionPublishedAsCommitted(t *testing.T) {
	t.Parallel()
	e := newBinlogEnv(t)
	p, _ := e.runReady(t, "BRIDGE_RELAY_MAX_IN_FLIGHT=50", "BRIDGE_BINLOG_SWEEP_INTERVAL=1h")
	tx, err := e.db.Begin()
	require.NoError(t, err)
	const rows = 170
	for i := 0; i < rows; i += 10 {
		var values []string
		var args []any
		for j := i; j < i+10; j++ {
			values = append(values, "(?, 'events.large', ?, 'large')")
			args = append(args, fmt.Sprintf("l-%d", j), []byte(fmt.Sprintf("inserted %d", j)))
		}
		_, err := tx.Exec(`INSERT INTO `+e.table+` (idempotency_key, subject, payload, ordering_key) VALUES `+strings.Join(values, ", "), args...)
		require.NoError(t, err)
	}
	for _, j := range []int{0, 120, rows - 1} {
		_, err := tx.Exec(`UPDATE `+e.table+` SET payload = ? WHERE idempotency_key = ?`, []byte(fmt.Sprintf("updated %d", j)), fmt.Sprintf("l-%d", j))
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		return e.countDone(t) == rows
	}, "not every row relayed")
	msgs := bridgetest.Messages(t, e.js, "EVENTS")
	require.Len(t, msgs, rows)
	for i, m := range msgs {
		want := fmt.Sprintf("inserted %d", i)
		if i == 0 || i == 120 || i == rows-1 {
			want = fmt.Sprintf("updated %d", i)
		}
		require.Equal(t, want, string(m.Data()), "stream position %d", i)
	}
}

// TestBinlogRowsTheLogNeverBroughtAreNamed: a row written by a session
// with sql_log_bin = 0 while the relay reads the log is not in it: the
// sweep publishes it, and says so, at WARN and on /readyz (degraded)
// until a sweep finds none (before: silently, late and out of commit
// order).
func TestBinlogRowsTheLogNeverBroughtAreNamed(t *testing.T) {
	t.Parallel()
	e := newBinlogEnv(t)
	p, http := e.runReady(t, "BRIDGE_BINLOG_SWEEP_INTERVAL=1s")
	ctx := context.Background()
	conn := e.session(t, "sql_log_bin = 0")
	_, err := conn.ExecContext(ctx, `INSERT INTO `+e.table+` (idempotency_key, subject, payload) VALUES ('unlogged', 'events.unlogged', 'unlogged')`)
	require.NoError(t, err)
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
		return e.statuses(t)["unlogged"] == "done"
	}, "the sweep never published the row the log did not bring")
	require.Contains(t, p.stderr.String(), "1 row committed while the relay read the binary log was not in it")
	poll(t, 30*time.Second, func() bool {
		_, body := readyz(http)
		return !strings.Contains(body, "committed while the relay read the binary log")
	}, "/readyz still names the rows after a sweep found none")
}

// holdMarks relays a first row ("warm"), then locks the position row of
// the running relay's table until the returned transaction ends (rolled
// back at the test's end): the next marks' transaction waits on it, as
// one held up by the database would.
func (e *binlogEnv) holdMarks(t *testing.T) *sql.Tx {
	t.Helper()
	_, err := e.db.Exec(`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload) VALUES ('warm', 'events.x', 'warm')`)
	require.NoError(t, err)
	poll(t, 30*time.Second, func() bool { return e.countDone(t) == 1 }, "the first row was not relayed")
	lock, err := e.db.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Rollback() })
	_, err = lock.Exec(`SELECT * FROM ` + e.table + `_binlog FOR UPDATE`)
	require.NoError(t, err)
	return lock
}

// TestBinlogSlowMarksDoNotHoldPublishing: while the marks' transaction
// waits on the database (here a lock on the position row, as a commit held
// up would), the relay goes on publishing the transactions the log brings
// — up to three batches' rows with the marker — and the marks of every one
// of them are written in one go once the database answers. Before, two
// batches queued for the marker held every one after them: at 1,000 rows/s
// a mark commit held up 20–30 ms put that much on the latency of every row
// behind it. While the write waits longer than 5 s, /readyz answers 503
// naming the marks and the rows not marked, and the gauges
// bridge_binlog_rows_unmarked and bridge_binlog_mark_wait_seconds say so
// (nothing told of it before, but a WARN once the write's deadline of 30 s
// ended); both clear once the marks are written.
func TestBinlogSlowMarksDoNotHoldPublishing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newBinlogEnv(t)
	_, http := e.runReady(t, "BRIDGE_BINLOG_SWEEP_INTERVAL=1h")
	insert := func(key string) {
		t.Helper()
		_, err := e.db.Exec(`INSERT INTO `+e.table+` (idempotency_key, subject, payload) VALUES (?, 'events.x', ?)`, key, key)
		require.NoError(t, err)
	}
	lock := e.holdMarks(t)
	const rows = 30
	for i := range rows {
		insert("r-" + strconv.Itoa(i)) // a transaction, a batch, each
		time.Sleep(10 * time.Millisecond)
	}
	stream, err := e.js.Stream(ctx, "EVENTS")
	require.NoError(t, err)
	poll(t, 15*time.Second, func() bool {
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs == rows+1
	}, "the rows were not published while their marks waited")
	require.Equal(t, 1, e.countDone(t), "marks written while the position row was locked")
	poll(t, 30*time.Second, func() bool {
		code, body := readyz(http)
		return code == 503 && strings.Contains(body, "marks: a statement has waited") && strings.Contains(body, "rows published and not marked")
	}, "/readyz never said that the marks wait")
	m := metrics(t, http)
	require.GreaterOrEqual(t, metricValue(m, "bridge_binlog_rows_unmarked"), float64(rows), "rows unmarked:\n%s", m)
	require.Greater(t, metricValue(m, "bridge_binlog_mark_wait_seconds"), 5.0)

	require.NoError(t, lock.Rollback())
	poll(t, 30*time.Second, func() bool { return e.countDone(t) == rows+1 }, "the rows were not marked once the database answered")
	poll(t, 30*time.Second, func() bool { code, _ := readyz(http); return code == 200 }, "/readyz still fails once the marks were written")
	m = metrics(t, http)
	require.Zero(t, metricValue(m, "bridge_binlog_rows_unmarked"))
	require.Zero(t, metricValue(m, "bridge_binlog_mark_wait_seconds"))
	seen := map[string]int{}
	for _, m := range bridgetest.Messages(t, e.js, "EVENTS") {
		seen[string(m.Data())]++
	}
	require.Len(t, seen, rows+1)
	for key, n := range seen {
		require.Equal(t, 1, n, "row %s published %d times", key, n)
	}
}

// TestBinlogDeleteOnRelay: with relay.delete_on_relay each row read from
// the log is deleted once its PubAck came (by primary key: a scan of the
// table would lock the producers' rows until the marks commit), and the
// rows inserted meanwhile are left alone until their turn.
func TestBinlogDeleteOnRelay(t *testing.T) {
	t.Parallel()
	e := newBinlogEnv(t)
	e.runReady(t, "BRIDGE_RELAY_DELETE_ON_RELAY=true")
	for i := range 20 {
		_, err := e.db.Exec(`INSERT INTO `+e.table+` (idempotency_key, subject, payload) VALUES (?, 'events.x', ?)`, "d-"+strconv.Itoa(i), strconv.Itoa(i))
		require.NoError(t, err)
	}
	poll(t, 30*time.Second, func() bool { return e.count(t, "") == 0 }, "the relayed rows were not deleted")
	var got []string
	for _, m := range bridgetest.Messages(t, e.js, "EVENTS") {
		got = append(got, string(m.Data()))
	}
	want := make([]string, 20)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	require.Equal(t, want, got, "each row once, in commit order")
}

// TestBinlogDoubtZoneCountsUnmarkedRows: a relay killed while its marks
// wait (the position row locked) has published rows it did not mark, after
// rows it marked without storing the position past them (the parts of a
// transaction larger than a batch; with max_in_flight 1, every row). A
// restart after the duplicate window looks the unmarked ones up in the
// stream instead of publishing them again: the doubt zone counts the rows
// the table does not hold settled. It counted every row, the marked ones
// used it up, and the rows after them were published twice (a saboteur).
func TestBinlogDoubtZoneCountsUnmarkedRows(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name            string
		maxInFlight     string
		bigRows, single int
	}{
		{"a transaction in parts, then one-row transactions", "2", 20, 6},
		{"one-row transactions, max_in_flight 1", "1", 0, 12},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const window = 5 * time.Second
			e := newBinlogEnvWindow(t, window)
			env := e.env("BRIDGE_RELAY_MAX_IN_FLIGHT="+c.maxInFlight, "BRIDGE_BINLOG_SWEEP_INTERVAL=1h")
			p, _ := e.runReady(t, "BRIDGE_RELAY_MAX_IN_FLIGHT="+c.maxInFlight, "BRIDGE_BINLOG_SWEEP_INTERVAL=1h")
			lock := e.holdMarks(t)
			var err error
			if c.bigRows > 0 {
				values := make([]string, c.bigRows)
				for i := range values {
					values[i] = fmt.Sprintf("('big-%d', 'events.x', 'big-%d')", i, i)
				}
				_, err = e.db.Exec(`INSERT INTO ` + e.table + ` (idempotency_key, subject, payload) VALUES ` + strings.Join(values, ","))
				require.NoError(t, err)
			}
			for i := range c.single {
				_, err = e.db.Exec(`INSERT INTO `+e.table+` (idempotency_key, subject, payload) VALUES (?, 'events.x', ?)`, "s-"+strconv.Itoa(i), "s-"+strconv.Itoa(i))
				require.NoError(t, err)
				time.Sleep(5 * time.Millisecond)
			}
			// Until the relay publishes no more: its marks wait on the lock.
			stream, err := e.js.Stream(ctx, "EVENTS")
			require.NoError(t, err)
			last, still := uint64(0), 0
			poll(t, 30*time.Second, func() bool {
				info, err := stream.Info(ctx)
				require.NoError(t, err)
				if info.State.Msgs == last {
					still++
				} else {
					last, still = info.State.Msgs, 0
				}
				return still >= 40 // 2 s at poll's 50 ms
			}, "the relay kept publishing")
			require.Greater(t, e.count(t, "pending"), 1, "rows published but not marked")
			kill(t, p)
			require.NoError(t, lock.Rollback())
			time.Sleep(window + 2*time.Second)

			total := 1 + c.bigRows + c.single
			p = start(t, e.dir, env, "run")
			poll(t, 60*time.Second, func() bool {
				require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
				return e.countDone(t) == total
			}, "not every row was relayed")
			seen := map[string]int{}
			for _, m := range bridgetest.Messages(t, e.js, "EVENTS") {
				seen[string(m.Data())]++
			}
			require.Len(t, seen, total)
			for key, n := range seen {
				require.Equal(t, 1, n, "row %s published %d times", key, n)
			}
		})
	}
}

// TestBinlogServerIDTakenIsNamed: two relays of different tables given the
// same binlog.server_id. The server refuses the second replica connection
// with that id (MariaDB 4052); /readyz names the fix, as the log does, and
// not the server's words alone (a newcomer's trial).
func TestBinlogServerIDTakenIsNamed(t *testing.T) {
	t.Parallel()
	a, b := newBinlogEnv(t), newBinlogEnv(t)
	id := fmt.Sprintf("BRIDGE_BINLOG_SERVER_ID=%d", 3_000_000_000+rand.IntN(1_000_000_000))
	_, httpA := a.runReady(t, id)
	httpB := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	start(t, b.dir, b.env(id, "BRIDGE_HTTP_LISTEN="+httpB), "run")
	poll(t, 60*time.Second, func() bool {
		for _, addr := range []string{httpA, httpB} {
			if code, body := readyz(addr); code == 503 && strings.Contains(body, "set binlog.server_id to a value of its own") {
				return true
			}
		}
		return false
	}, "/readyz never named binlog.server_id")
}
