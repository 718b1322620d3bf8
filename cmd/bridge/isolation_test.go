package main

// Isolation and honesty, with the real binary against real servers: a
// fault stays with the rows it concerns while the rows of other subjects
// are relayed, and no state in which claimable rows sit still looks
// healthy.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// isoEnv is an outbox table (PostgreSQL when available, SQLite
// otherwise) and the environment of a relay on it.
type isoEnv struct {
	url string
	db  *sql.DB
	tbl string
	ph  func(int) string // placeholder n
	env []string
	dir string
}

func newIsoEnv(t *testing.T, kind, natsURL string, extra ...string) *isoEnv {
	t.Helper()
	ctx := context.Background()
	var dbURL, table string
	switch kind {
	case "postgres":
		dbURL, table = bridgetest.PostgresTable(t)
	default:
		dbURL, table = bridgetest.SQLiteURL(t), "outbox"
	}
	db, err := outbox.Open(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = outbox.Migrate(ctx, db, table)
	require.NoError(t, err)
	e := &isoEnv{url: dbURL, db: db.SQL, tbl: table, dir: t.TempDir(), ph: func(int) string { return "?" }}
	if kind == "postgres" {
		e.ph = func(n int) string { return "$" + strconv.Itoa(n) }
	}
	e.env = append([]string{
		"BRIDGE_DATABASE_URL=" + dbURL,
		"BRIDGE_DATABASE_TABLE=" + table,
		"BRIDGE_NATS_URL=" + natsURL,
		"BRIDGE_HTTP_LISTEN=127.0.0.1:0",
		"BRIDGE_RELAY_POLL_INTERVAL=50ms",
		"BRIDGE_RELAY_BACKOFF_INITIAL=200ms",
		"BRIDGE_RELAY_BACKOFF_MAX=1s",
		"BRIDGE_SHUTDOWN_TIMEOUT=5s",
	}, extra...)
	return e
}

// insert writes one row as a service would, with any subject.
func (e *isoEnv) insert(t *testing.T, key, subject string) int64 {
	t.Helper()
	_, err := e.db.Exec(`INSERT INTO `+e.tbl+` (idempotency_key, subject, payload) VALUES (`+e.ph(1)+`, `+e.ph(2)+`, `+e.ph(3)+`)`,
		key, subject, []byte("x"))
	require.NoError(t, err)
	var id int64
	require.NoError(t, e.db.QueryRow(`SELECT id FROM `+e.tbl+` WHERE idempotency_key = `+e.ph(1), key).Scan(&id))
	return id
}

// row is one row's state.
type rowState struct {
	Status    string
	Attempts  int
	LastError string
}

func (e *isoEnv) row(t *testing.T, id int64) rowState {
	t.Helper()
	var r rowState
	var msg sql.NullString
	require.NoError(t, e.db.QueryRow(`SELECT status, attempts, last_error FROM `+e.tbl+` WHERE id = `+e.ph(1), id).Scan(&r.Status, &r.Attempts, &msg))
	r.LastError = msg.String
	return r
}

// waitRows waits until every id is in status, the relay still running.
func (e *isoEnv) waitRows(t *testing.T, p *process, d time.Duration, status string, ids ...int64) {
	t.Helper()
	poll(t, d, func() bool {
		require.False(t, p.exited(), "bridge run exited (%d)\nstderr:\n%s", p.code, p.stderr)
		for _, id := range ids {
			if e.row(t, id).Status != status {
				return false
			}
		}
		return true
	}, "rows %v never all %s", ids, status)
}

func (e *isoEnv) run(t *testing.T, args ...string) (*process, string) {
	t.Helper()
	p := start(t, e.dir, e.env, append([]string{"run"}, args...)...)
	return p, "http://" + relayHTTPAddr(t, p)
}

func (e *isoEnv) bridge(t *testing.T, args ...string) result {
	t.Helper()
	return runBridge(t, e.dir, e.env, args...)
}

// TestUnsafeStreamHoldsBackOnlyItsRows: a stream the duplicate-window
// guard finds unsafe while the relay runs holds back the rows it captures,
// without counting their attempts, with a last_error naming the stream, the
// problem and the fix; every other stream flows, readiness stays 200 and
// names it, it is logged once and counted. Fixed, its rows flow without a
// restart.
func TestUnsafeStreamHoldsBackOnlyItsRows(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		stream jetstream.StreamConfig
		want   []string
	}{
		{"interest retention", jetstream.StreamConfig{Name: "INT", Subjects: []string{"int.>"}, Retention: jetstream.InterestPolicy, Duplicates: 5 * time.Minute},
			[]string{"stream INT", "retention is Interest", "limits retention"}},
		{"short duplicate window", jetstream.StreamConfig{Name: "SHORT", Subjects: []string{"int.>"}, Duplicates: 5 * time.Second},
			[]string{"stream SHORT", "duplicate window 5s", "at least 35s"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n := bridgetest.StartNATS(t)
			_, js := n.JetStream(t)
			bridgetest.CreateStream(t, js, "EVENTS", "events.>")
			_, err := js.CreateStream(context.Background(), c.stream)
			require.NoError(t, err)
			e := newIsoEnv(t, "postgres", n.URL())
			held := e.insert(t, "held", "int.x")
			var others []int64
			for i := range 5 {
				others = append(others, e.insert(t, fmt.Sprintf("e-%d", i), "events.x"))
			}
			p, base := e.run(t)
			e.waitRows(t, p, 30*time.Second, "done", others...)

			// The held row: failed, its attempt given back, and why.
			var r rowState
			poll(t, 30*time.Second, func() bool { r = e.row(t, held); return r.Status == "failed" }, "the held row never failed")
			require.Zero(t, r.Attempts, "holding back does not count the attempt")
			for _, w := range c.want {
				require.Contains(t, r.LastError, w)
			}
			st := e.bridge(t, "status")
			require.Equal(t, 0, st.code, "%s", st)
			require.Contains(t, st.stdout, fmt.Sprintf("oldest failed: row %d (int.x", held))
			require.Contains(t, st.stdout, "stream "+c.stream.Name)

			code, body := httpGet(base + "/readyz")
			require.Equal(t, http.StatusOK, code, "a stream held back is a partial fault: %s", body)
			require.Contains(t, body, `"dedup_guard":"degraded: rows held back: stream `+c.stream.Name)
			_, m := httpGet(base + "/metrics")
			v, _ := metric(m, "bridge_dedup_unsafe_streams")
			require.Equal(t, 1.0, v, "%s", m)

			// Held back again after relay.HoldBack (15 s): still one log line.
			poll(t, 60*time.Second, func() bool {
				_, m := httpGet(base + "/metrics")
				v, _ := metric(m, `bridge_rows_failed_total{class="held"}`)
				return v >= 2
			}, "the row was not held back a second time")
			require.Equal(t, 1, strings.Count(p.stderr.String(), "holding back its rows"), "%s", p.stderr)
			_, err = js.Stream(context.Background(), c.stream.Name)
			require.NoError(t, err)
			s, _ := js.Stream(context.Background(), c.stream.Name)
			require.Zero(t, s.CachedInfo().State.Msgs, "nothing was published to the unsafe stream")

			if c.stream.Retention == jetstream.LimitsPolicy {
				// Fixed by the operator: the row flows, no restart.
				fixed := c.stream
				fixed.Duplicates = time.Minute
				_, err = js.UpdateStream(context.Background(), fixed)
				require.NoError(t, err)
				e.waitRows(t, p, 60*time.Second, "done", held)
			}
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
			require.Equal(t, 0, p.wait(t, 30*time.Second), "%s", p.stderr)
		})
	}
}

// TestSubjectTooLongForNATSIsADeadLetter: a subject that cannot fit the
// publish line (the server would close the connection, for good) is a
// dead letter before it is published; the 20 rows around it arrive and the
// relay's connection stays the one it had.
func TestSubjectTooLongForNATSIsADeadLetter(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	e := newIsoEnv(t, "sqlite", n.URL())
	var good []int64
	for i := range 10 {
		good = append(good, e.insert(t, fmt.Sprintf("before-%d", i), "events.x"))
	}
	long := e.insert(t, "long", "events."+strings.Repeat("x", 5007-len("events.")))
	// Subjects the NATS system reserves: publishing to them is a request to
	// the JetStream API (delete or purge the stream) or someone's inbox.
	reserved := []int64{
		e.insert(t, "delete", "$JS.API.STREAM.DELETE.EVENTS"),
		e.insert(t, "purge", "$JS.API.STREAM.PURGE.EVENTS"),
		e.insert(t, "inbox", "_INBOX.somebody.1"),
	}
	for i := range 10 {
		good = append(good, e.insert(t, fmt.Sprintf("after-%d", i), "events.x"))
	}
	p, base := e.run(t)
	e.waitRows(t, p, 30*time.Second, "done", good...)
	e.waitRows(t, p, 30*time.Second, "permanent_failed", long)
	r := e.row(t, long)
	require.Contains(t, r.LastError, "5007 bytes")
	require.Contains(t, r.LastError, "max_control_line")
	e.waitRows(t, p, 30*time.Second, "permanent_failed", reserved...)
	require.Contains(t, e.row(t, reserved[0]).LastError, `"$JS.API.STREAM.DELETE.EVENTS" is reserved`)
	require.Contains(t, e.row(t, reserved[2]).LastError, "reply inboxes")
	for _, subject := range []string{"$JS.API.STREAM.DELETE.EVENTS", "$SYS.REQ.SERVER.PING", "_INBOX.x"} {
		r := e.bridge(t, "enqueue", "--subject", subject)
		require.Equal(t, 2, r.code, "%s", r)
		require.Contains(t, r.stderr, "is reserved")
	}

	connz, err := n.Server.Connz(&server.ConnzOptions{State: server.ConnClosed})
	require.NoError(t, err)
	for _, c := range connz.Conns {
		require.NotContains(t, c.Name, "outbox-bridge", "the relay's connection was closed: %s", c.Reason)
	}
	require.NotContains(t, p.stderr.String(), "closed for good")
	code, body := httpGet(base + "/readyz")
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.Len(t, bridgetest.Messages(t, js, "EVENTS"), 20)
}

// insertBatch writes rows (key, subject) in one transaction, so that the
// relay claims them together.
func (e *isoEnv) insertBatch(t *testing.T, rows [][2]string) []int64 {
	t.Helper()
	tx, err := e.db.Begin()
	require.NoError(t, err)
	for _, r := range rows {
		_, err := tx.Exec(`INSERT INTO `+e.tbl+` (idempotency_key, subject, payload) VALUES (`+e.ph(1)+`, `+e.ph(2)+`, `+e.ph(3)+`)`,
			r[0], r[1], []byte("x"))
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	ids := make([]int64, len(rows))
	for i, r := range rows {
		require.NoError(t, e.db.QueryRow(`SELECT id FROM `+e.tbl+` WHERE idempotency_key = `+e.ph(1), r[0]).Scan(&ids[i]))
	}
	return ids
}

// probeLog polls /healthz and /readyz until the test ends and keeps what
// they answered.
type probeLog struct {
	mu      sync.Mutex
	healthz []string // "<code> <body>"
	readyz  []string
}

func watchProbes(t *testing.T, base string) *probeLog {
	l := &probeLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			hc, hb := httpGet(base + "/healthz")
			rc, rb := httpGet(base + "/readyz")
			l.mu.Lock()
			l.healthz = append(l.healthz, fmt.Sprint(hc, " ", hb))
			l.readyz = append(l.readyz, fmt.Sprint(rc, " ", rb))
			l.mu.Unlock()
			time.Sleep(20 * time.Millisecond) // sampled: the probes of another process, over time
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// seen reports whether an answer of probe contains all of parts.
func (l *probeLog) seen(probe string, parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	answers := l.healthz
	if probe == "readyz" {
		answers = l.readyz
	}
	return slices.ContainsFunc(answers, func(a string) bool {
		return !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(a, p) })
	})
}

// TestConnectionClosedForGoodHeals: a NATS server with a smaller
// max_control_line closes the relay's connection when a row's publish line
// does not fit, and nats.go does not reconnect. The relay starts again with
// a new connection — /healthz 503 meanwhile, /readyz never reading the
// stopped relay's closed database — and its counters go on. The row whose
// line closed it (the longest subject sent) is a dead letter at once; the
// rows in flight beside it are not charged an attempt. An ensured stream
// made unsafe by an operator does not stop the rebuilt relay. Rebuilds wait
// longer each time, and five within five minutes fail /healthz while the
// relay runs.
func TestConnectionClosedForGoodHeals(t *testing.T) {
	t.Parallel()
	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) { o.MaxControlLine = 1024 })
	natsURL := srv.ClientURL()
	js := natsClient(t, natsURL)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "G", Subjects: []string{"g.>"}, Duplicates: 5 * time.Second})
	require.NoError(t, err)
	e := newIsoEnv(t, "sqlite", natsURL, "BRIDGE_RELAY_BACKOFF_INITIAL=100ms", "BRIDGE_RELAY_BACKOFF_MAX=300ms")
	p, base := e.run(t, "--ensure-stream", "EVENTS:events.>", "--ensure-stream", "G:g.>")
	var good []int64
	for i := range 5 {
		good = append(good, e.insert(t, fmt.Sprintf("before-%d", i), "events.x"))
	}
	e.waitRows(t, p, 30*time.Second, "done", good...)
	probes := watchProbes(t, base)

	// Two rows whose lines do not fit, among good rows claimed with them.
	batch := [][2]string{{"poison-long", "events." + strings.Repeat("x", 2000)}}
	for i := range 20 {
		batch = append(batch, [2]string{fmt.Sprintf("mid-%d", i), "events.x"})
	}
	batch = append(batch, [2]string{"poison-short", "events." + strings.Repeat("y", 1500)})
	for i := range 10 {
		batch = append(batch, [2]string{fmt.Sprintf("after-%d", i), "events.x"})
	}
	ids := e.insertBatch(t, batch)
	poison := []int64{ids[0], ids[21]}
	good = append(append(good, ids[1:21]...), ids[22:]...)
	e.waitRows(t, p, 60*time.Second, "done", good...)
	e.waitRows(t, p, 30*time.Second, "permanent_failed", poison...)
	for _, id := range poison {
		r := e.row(t, id)
		require.Equal(t, 1, r.Attempts, "the row whose line closed the connection is a dead letter at once")
		require.Contains(t, r.LastError, "longer than the server's max_control_line")
	}
	for _, id := range good {
		require.Equal(t, 1, e.row(t, id).Attempts, "row %d was charged for a connection another row's line closed", id)
	}
	require.Equal(t, 2, strings.Count(p.stderr.String(), "building the relay again"), "one heal per poison row\n%s", p.stderr)
	require.Len(t, bridgetest.Messages(t, js, "EVENTS"), len(good))

	require.True(t, probes.seen("healthz", "503", "closed for good"), "/healthz never failed during a heal")
	require.False(t, probes.seen("readyz", "database is closed"), "/readyz read the stopped relay's database")
	var code int
	var body string
	poll(t, 30*time.Second, func() bool { // the last rebuild may still be waiting
		code, body = httpGet(base + "/readyz")
		return code == http.StatusOK
	}, "the relay never ran again: %s", body)
	require.Contains(t, body, "rows held back: stream G", "the unsafe ensured stream is held back, not fatal")
	_, m := httpGet(base + "/metrics")
	v, _ := metric(m, "bridge_rows_relayed_total")
	require.Equal(t, float64(len(good)), v, "counters go on across rebuilds\n%s", m)
	v, _ = metric(m, "bridge_rows_dead_total")
	require.Equal(t, 2.0, v)
	code, _ = httpGet(base + "/healthz")
	require.Equal(t, http.StatusOK, code, "two heals are not too many")

	// Three more, one after another (in one claim, a shorter poison line
	// sent before the longest one would close the connection again on its
	// retry: six or seven heals): five heals within five minutes.
	for i, n := range []int{1100, 1200, 1300} {
		id := e.insert(t, fmt.Sprintf("p%d", i+3), "events."+strings.Repeat("a", n))
		e.waitRows(t, p, 60*time.Second, "permanent_failed", id)
	}
	poll(t, 60*time.Second, func() bool {
		return p.exited() || strings.Count(p.stderr.String(), "building the relay again") >= 5
	}, "the relay did not heal five times")
	require.False(t, p.exited(), "bridge run exited (%d)\nstderr:\n%s", p.code, p.stderr)
	require.Equal(t, 5, strings.Count(p.stderr.String(), "building the relay again"), "one heal per poison row\n%s", p.stderr)
	poll(t, 30*time.Second, func() bool {
		code, body := httpGet(base + "/readyz")
		return code == http.StatusOK && strings.Contains(body, "dedup_guard")
	}, "the relay never ran again")
	code, body = httpGet(base + "/healthz")
	require.Equal(t, http.StatusServiceUnavailable, code, "five heals in five minutes: %s", body)
	require.Contains(t, body, "closed for good 5 times within 5m0s")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 30*time.Second), "%s", p.stderr)
}

// TestLostStreamIsCreatedAgain: the stream of --ensure-stream, deleted
// while the relay runs, is created again and rows written afterwards
// arrive, without a restart; a subject no stream captures says so in its
// last_error, while the other rows flow.
func TestLostStreamIsCreatedAgain(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	e := newIsoEnv(t, "sqlite", n.URL())
	p, base := e.run(t, "--ensure-stream", "EVENTS:events.>")
	first := e.insert(t, "first", "events.x")
	e.waitRows(t, p, 30*time.Second, "done", first)

	require.NoError(t, js.DeleteStream(context.Background(), "EVENTS"))
	orphan := e.insert(t, "orphan", "orders.created")
	var after []int64
	for i := range 5 {
		after = append(after, e.insert(t, fmt.Sprintf("after-%d", i), "events.x"))
	}
	e.waitRows(t, p, 60*time.Second, "done", after...)
	require.Contains(t, p.stderr.String(), "created again")
	_, m := httpGet(base + "/metrics")
	v, _ := metric(m, "bridge_streams_recreated_total")
	require.GreaterOrEqual(t, v, 1.0, "%s", m)
	require.Len(t, bridgetest.Messages(t, js, "EVENTS"), 5)

	poll(t, 30*time.Second, func() bool { return e.row(t, orphan).Status == "failed" }, "the orphan row never failed")
	require.Contains(t, e.row(t, orphan).LastError, "no stream captures subject orders.created")
}

// TestPermissionDeniedIsAttributedToItsRows: the relay's NATS user may not
// publish to perm.b.>; the server says so only to the connection's
// asynchronous error handler. The row to perm.b.denied becomes a dead
// letter (permanent, see forwarder.Classify) with the permission in its
// last_error, not a timeout; the other rows flow.
func TestPermissionDeniedIsAttributedToItsRows(t *testing.T) {
	t.Parallel()
	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "relay", Password: "relay-pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"perm.b.>"}}}},
			{Username: "admin", Password: "admin-pw"},
		}
	})
	port := srv.Addr().String()
	js := natsClient(t, "nats://admin:admin-pw@"+port)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>", "perm.>")
	e := newIsoEnv(t, "sqlite", "nats://"+port, "BRIDGE_NATS_USER=relay", "BRIDGE_NATS_PASSWORD=relay-pw", "BRIDGE_RELAY_PUBLISH_TIMEOUT=2s")
	denied := e.insert(t, "denied", "perm.b.denied")
	var others []int64
	for i := range 5 {
		others = append(others, e.insert(t, fmt.Sprintf("e-%d", i), "events.x"))
	}
	others = append(others, e.insert(t, "allowed", "perm.a.ok"))
	p, _ := e.run(t)
	e.waitRows(t, p, 30*time.Second, "done", others...)
	e.waitRows(t, p, 30*time.Second, "permanent_failed", denied)
	r := e.row(t, denied)
	require.Equal(t, 1, r.Attempts, "a denial is permanent: one attempt")
	require.Contains(t, r.LastError, "no permission to publish to the subject perm.b.denied")
	require.Contains(t, r.LastError, `Permissions Violation for Publish to "perm.b.denied"`)
	require.NotContains(t, r.LastError, "no PubAck")
}

// TestLagCountsFailedRowsAndRetryIsImmediate: a row that keeps failing (no
// stream captures its subject) is the relay's lag and `bridge status`
// names it; once the stream exists, `bridge retry` by id or by subject
// pattern sends the failed rows at once instead of after their backoff.
func TestLagCountsFailedRowsAndRetryIsImmediate(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	e := newIsoEnv(t, "postgres", n.URL(), "BRIDGE_RELAY_BACKOFF_INITIAL=10m", "BRIDGE_RELAY_BACKOFF_MAX=1h")
	created := e.insert(t, "created", "orders.created")
	updated := e.insert(t, "updated", "orders.updated")
	p, base := e.run(t)
	e.waitRows(t, p, 30*time.Second, "failed", created, updated)
	flowing := e.insert(t, "flowing", "events.x")
	e.waitRows(t, p, 30*time.Second, "done", flowing)

	// First scrape: the table collector reads the table now.
	_, m := httpGet(base + "/metrics")
	lag, ok := metric(m, "bridge_relay_lag_seconds")
	require.True(t, ok, "%s", m)
	require.Positive(t, lag, "a failed row is lag")
	st := e.bridge(t, "status", "--json")
	require.Equal(t, 0, st.code, "%s", st)
	var doc struct {
		OldestUnsettled *float64 `json:"oldest_unsettled_seconds"`
		OldestFailed    *struct {
			ID        int64  `json:"id"`
			Subject   string `json:"subject"`
			LastError string `json:"last_error"`
		} `json:"oldest_failed"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &doc), st.stdout)
	require.NotNil(t, doc.OldestUnsettled, st.stdout)
	require.NotNil(t, doc.OldestFailed, st.stdout)
	require.Equal(t, created, doc.OldestFailed.ID)
	require.Equal(t, "orders.created", doc.OldestFailed.Subject)
	require.Contains(t, doc.OldestFailed.LastError, "no stream captures subject orders.created")

	bridgetest.CreateStream(t, js, "ORDERS", "orders.>")
	r := e.bridge(t, "retry", "--id", strconv.FormatInt(created, 10))
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "1 failed row claimable now")
	e.waitRows(t, p, 20*time.Second, "done", created)
	require.Equal(t, "failed", e.row(t, updated).Status, "a row not retried waits out its backoff")

	r = e.bridge(t, "retry", "--subject", "orders.*")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "1 failed row claimable now")
	e.waitRows(t, p, 20*time.Second, "done", updated)

	r = e.bridge(t, "retry", "--subject", "orders.>.x")
	require.Equal(t, 2, r.code, "%s", r)
}

// TestRelayWaitsForNATSAndDatabase: `bridge run` started while neither the
// database nor NATS can be reached keeps running: /healthz 200, /readyz
// 503 naming what it waits for, each attempt logged. The database appears
// after 3 s, NATS 20 s after the start; rows are relayed within 10 s of
// NATS being up, by the same process.
func TestRelayWaitsForNATSAndDatabase(t *testing.T) {
	t.Parallel()
	natsPort := freePort(t)
	e := newIsoEnv(t, "postgres", fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	// The relay reaches PostgreSQL through a proxy that is not there yet.
	u, err := url.Parse(e.url)
	require.NoError(t, err)
	pgAddr, dbAddr := u.Host, fmt.Sprintf("127.0.0.1:%d", freePort(t))
	u.Host = dbAddr
	env := append(e.env, "BRIDGE_DATABASE_URL="+u.String())

	began := time.Now()
	p := start(t, e.dir, env, "run", "--ensure-stream", "EVENTS:events.>")
	var addr string
	readyz := func() (int, string) { return httpGet("http://" + addr + "/readyz") }
	poll(t, 30*time.Second, func() bool {
		require.False(t, p.exited(), "bridge run exited (%d)\nstderr:\n%s", p.code, p.stderr)
		for _, rec := range logRecords(p.stderr.String()) {
			if rec["msg"] == "relay cannot start yet; trying again" {
				addr, _ = rec["http"].(string)
			}
		}
		return addr != ""
	}, "bridge run never logged an attempt\nstderr:\n%s", p.stderr)
	code, body := httpGet("http://" + addr + "/healthz")
	require.Equal(t, http.StatusOK, code, "/healthz while waiting: %s", body)
	code, body = readyz()
	require.Equal(t, http.StatusServiceUnavailable, code, "%s", body)
	require.Contains(t, body, dbAddr, "/readyz names the database it waits for")

	time.Sleep(time.Until(began.Add(3 * time.Second))) // the database's outage lasts 3 s: time is what is tested
	bridgetest.StartProxyOn(t, dbAddr, pgAddr)
	poll(t, 30*time.Second, func() bool {
		code, body = readyz()
		return strings.Contains(body, "connect to NATS")
	}, "/readyz never named NATS once the database was up: %s", body)
	require.Equal(t, http.StatusServiceUnavailable, code)
	var ids []int64
	for i := range 5 {
		ids = append(ids, e.insert(t, fmt.Sprintf("w-%d", i), "events.x"))
	}
	require.False(t, p.exited(), "bridge run exited (%d)\nstderr:\n%s", p.code, p.stderr)

	time.Sleep(time.Until(began.Add(20 * time.Second))) // and NATS's 20 s
	bridgetest.StartNATSOn(t, natsPort)
	up := time.Now()
	e.waitRows(t, p, 10*time.Second, "done", ids...)
	t.Logf("rows relayed %s after NATS was up", time.Since(up).Round(time.Millisecond))
	require.Greater(t, strings.Count(p.stderr.String(), "relay cannot start yet"), 3, "each attempt is logged")
	code, body = readyz()
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 30*time.Second), "%s", p.stderr)
}

// TestStalledRelayFailsLiveness: claimable rows that the relay does not
// claim (here: its NATS server is gone) make it stalled after
// relay.stall_after, and unhealthy after relay.stall_unhealthy_after. Rows
// waiting out a long backoff, and an empty table, never do; meanwhile the
// other rows flow.
func TestStalledRelayFailsLiveness(t *testing.T) {
	t.Parallel()
	stall := []string{"BRIDGE_RELAY_STALL_AFTER=1s", "BRIDGE_RELAY_STALL_UNHEALTHY_AFTER=2s"}

	t.Run("backoff and empty table", func(t *testing.T) {
		t.Parallel()
		n := bridgetest.StartNATS(t)
		_, js := n.JetStream(t)
		bridgetest.CreateStream(t, js, "EVENTS", "events.>")
		e := newIsoEnv(t, "sqlite", n.URL(), append(stall, "BRIDGE_RELAY_BACKOFF_INITIAL=1h", "BRIDGE_RELAY_BACKOFF_MAX=2h")...)
		p, base := e.run(t)
		time.Sleep(3 * time.Second) // an empty table for longer than stall_after
		waiting := e.insert(t, "no-stream", "orders.created")
		e.waitRows(t, p, 30*time.Second, "failed", waiting)
		flowing := e.insert(t, "flowing", "events.x")
		e.waitRows(t, p, 30*time.Second, "done", flowing)
		time.Sleep(4 * time.Second) // longer than stall_after + stall_unhealthy_after
		code, body := httpGet(base + "/healthz")
		require.Equal(t, http.StatusOK, code, "%s", body)
		_, m := httpGet(base + "/metrics")
		v, ok := metric(m, "bridge_relay_stalled_seconds")
		require.True(t, ok, "%s", m)
		require.Zero(t, v)
		require.NotContains(t, p.stderr.String(), "relay stalled")
	})

	t.Run("nothing claimed", func(t *testing.T) {
		t.Parallel()
		n := bridgetest.StartNATS(t)
		_, js := n.JetStream(t)
		bridgetest.CreateStream(t, js, "EVENTS", "events.>")
		e := newIsoEnv(t, "sqlite", n.URL(), stall...)
		p, base := e.run(t)
		first := e.insert(t, "first", "events.x")
		e.waitRows(t, p, 30*time.Second, "done", first)
		n.Stop()
		e.insert(t, "waiting", "events.x")
		poll(t, 30*time.Second, func() bool {
			code, _ := httpGet(base + "/healthz")
			return code == http.StatusServiceUnavailable
		}, "/healthz never failed while rows sat claimable")
		_, body := httpGet(base + "/healthz")
		require.Contains(t, body, "stalled")
		_, m := httpGet(base + "/metrics")
		v, _ := metric(m, "bridge_relay_stalled_seconds")
		require.Positive(t, v, "%s", m)
		require.Contains(t, p.stderr.String(), "relay stalled")

		n.Restart(t)
		poll(t, 30*time.Second, func() bool {
			code, _ := httpGet(base + "/healthz")
			return code == http.StatusOK
		}, "/healthz never recovered once rows flowed again")
	})
}

// TestFrozenNATSServerIsNotReady: the NATS server stops answering but its
// TCP connection stays open (SIGSTOP, a stuck VM, a black-holed network:
// here a proxy that stops forwarding). /readyz says so within seconds, the
// relay claims nothing meanwhile, and the rows published into the frozen
// connection are given back without counting their attempt. Thawed, every
// row arrives once.
func TestFrozenNATSServerIsNotReady(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	proxy := bridgetest.StartProxy(t, n.Server.Addr().String())
	e := newIsoEnv(t, "sqlite", "nats://"+proxy.Addr(),
		"BRIDGE_RELAY_PUBLISH_TIMEOUT=1s", "BRIDGE_RELAY_ACK_DEADLINE=2s", "BRIDGE_RELAY_INFLIGHT_TIMEOUT=3s",
		"BRIDGE_DEDUP_GUARD=off")
	p, base := e.run(t)
	ids := []int64{e.insert(t, "before", "events.x")}
	e.waitRows(t, p, 30*time.Second, "done", ids...)

	proxy.Freeze()
	for i := range 5 {
		ids = append(ids, e.insert(t, fmt.Sprintf("frozen-%d", i), "events.x"))
	}
	poll(t, 30*time.Second, func() bool {
		code, body := httpGet(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, `"nats":"connected, but the server does not answer`)
	}, "/readyz never said that the server does not answer")
	// Past the publish timeout and the ack deadline of whatever was sent.
	poll(t, 30*time.Second, func() bool {
		for _, id := range ids[1:] {
			if e.row(t, id).Status == "in_flight" {
				return false
			}
		}
		return true
	}, "rows stayed in flight behind the frozen server")
	time.Sleep(3 * time.Second) // the relay would have claimed and published them again
	for _, id := range ids[1:] {
		r := e.row(t, id)
		require.Zero(t, r.Attempts, "row %d burned an attempt while the server was frozen: %+v", id, r)
	}

	proxy.Thaw()
	e.waitRows(t, p, 60*time.Second, "done", ids...)
	code, body := httpGet(base + "/readyz")
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.Len(t, bridgetest.Messages(t, js, "EVENTS"), len(ids))
	require.Contains(t, p.stderr.String(), "NATS server does not answer")
}

// TestRowInDoubtWithALongSubjectKeepsTheConnection: a row claimed before,
// a minute ago — beyond its stream's 5 s duplicate window — is reconciled
// against the stream before it is published again. Its subject is as long
// as the relay allows and the stream's name long enough that the API
// subject of a consumer filtered by it would not fit the server's control
// line: the connection stays up, the row is found in the stream (not
// published twice), and the other rows flow.
func TestRowInDoubtWithALongSubjectKeepsTheConnection(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	const stream = "LONG"
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: stream, Subjects: []string{"l.>"}, Duplicates: 5 * time.Second})
	require.NoError(t, err)
	subject := "l." + strings.Repeat("x", 4003-len(stream)-len("l."))
	e := newIsoEnv(t, "sqlite", n.URL(),
		"BRIDGE_RELAY_PUBLISH_TIMEOUT=1s", "BRIDGE_RELAY_ACK_DEADLINE=2s", "BRIDGE_RELAY_INFLIGHT_TIMEOUT=3s")
	doubt := e.insert(t, "in-doubt", subject)
	_, err = e.db.Exec(`UPDATE `+e.tbl+` SET status = 'failed', attempts = 1, first_claimed_at = ? WHERE id = ?`,
		time.Now().Add(-time.Minute).UTC().Format("2006-01-02T15:04:05.000Z"), doubt)
	require.NoError(t, err)
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, "in-doubt")
	ack, err := js.PublishMsg(context.Background(), m) // the earlier publish, never marked
	require.NoError(t, err)
	var good []int64
	for i := range 5 {
		good = append(good, e.insert(t, fmt.Sprintf("g-%d", i), "events.x"))
	}
	p, _ := e.run(t)
	e.waitRows(t, p, 30*time.Second, "done", append(good, doubt)...)
	var seq int64
	require.NoError(t, e.db.QueryRow(`SELECT stream_seq FROM `+e.tbl+` WHERE id = ?`, doubt).Scan(&seq))
	require.Equal(t, int64(ack.Sequence), seq, "found in the stream, not published again")
	require.Len(t, bridgetest.Messages(t, js, stream), 1)
	require.NotContains(t, p.stderr.String(), "closed for good")
}

// TestReplyInboxRefused: the relay's NATS user may publish but not
// subscribe to _INBOX.>, so no PubAck (and no JetStream API answer) can
// reach it: the messages are stored, their PubAcks never come. The relay
// says so — /readyz 503 naming the inbox, the rows' last_error — claims
// nothing while it lasts, charges no attempt, and does not publish the
// rows again and again (each again past the duplicate window would be
// stored twice).
func TestReplyInboxRefused(t *testing.T) {
	t.Parallel()
	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "relay", Password: "relay-pw", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"events.>", "$JS.API.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"nothing.>"}}}},
			{Username: "admin", Password: "admin-pw"},
		}
	})
	port := srv.Addr().String()
	js := natsClient(t, "nats://admin:admin-pw@"+port)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	// The ack deadline leaves room for the guard's lookup (up to 1 s, the
	// API cannot answer either) before the publish.
	e := newIsoEnv(t, "sqlite", "nats://"+port, "BRIDGE_NATS_USER=relay", "BRIDGE_NATS_PASSWORD=relay-pw",
		"BRIDGE_RELAY_PUBLISH_TIMEOUT=1s", "BRIDGE_RELAY_ACK_DEADLINE=3s", "BRIDGE_RELAY_INFLIGHT_TIMEOUT=4s")
	var ids []int64
	for i := range 5 {
		ids = append(ids, e.insert(t, fmt.Sprintf("nb-%d", i), "events.nb"))
	}
	p, base := e.run(t)
	poll(t, 30*time.Second, func() bool {
		code, body := httpGet(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "reply inbox")
	}, "/readyz never said the reply inbox is refused")
	poll(t, 30*time.Second, func() bool {
		for _, id := range ids {
			if r := e.row(t, id); r.Status == "in_flight" || (r.Status == "pending" && r.LastError == "") {
				return false
			}
		}
		return true
	}, "the rows never learned why")
	time.Sleep(4 * time.Second) // longer than publish timeout and lease: nothing more happens
	for _, id := range ids {
		r := e.row(t, id)
		require.Zero(t, r.Attempts, "row %d: %+v", id, r)
		require.Contains(t, r.LastError, "no permission to subscribe to _INBOX.>", "row %d", id)
	}
	s, err := js.Stream(context.Background(), "EVENTS")
	require.NoError(t, err)
	require.LessOrEqual(t, s.CachedInfo().State.Msgs, uint64(len(ids)), "rows published again")
	require.False(t, p.exited())
}
