package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
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
	url, table := bridgetest.MySQLBinlogTable(t)
	n := bridgetest.StartNATS(t)
	db, err := outbox.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	js := natsClient(t, n.URL())
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: 2 * time.Minute})
	require.NoError(t, err)
	e := &binlogEnv{url: url, table: table, db: db.SQL, natsURL: n.URL(), js: js, dir: t.TempDir()}
	r := runBridge(t, e.dir, e.env(), "migrate")
	require.Zero(t, r.code, "%s", r)
	require.Contains(t, r.stdout, "binary log position table "+table+"_binlog")
	return e
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
	require.Len(t, msgs, total, "the stream holds exactly one message per row")
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
