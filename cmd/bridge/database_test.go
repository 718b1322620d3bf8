package main

// Databases as production runs them, with the real binary: a failover
// that leaves the database read-only for a while, a PgBouncer in
// transaction mode in front of PostgreSQL, a SERIALIZABLE default
// isolation, table names in mixed case. Settings are changed only on
// databases the tests create.

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// postgresAdmin opens the test server's own database (closed when the test
// ends), for ALTER DATABASE and pg_stat_activity.
func postgresAdmin(t *testing.T) *sql.DB {
	t.Helper()
	admin, err := sql.Open("pgx", bridgetest.PostgresURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	return admin
}

// databaseName is the database of a postgres:// URL.
func databaseName(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return strings.TrimPrefix(u.Path, "/")
}

// stringRef prints the string it points to when a failure message is
// formatted, not when the message is built.
type stringRef struct{ s *string }

func (r stringRef) String() string { return *r.s }

// noErrorLogged fails the test when a relay logged at ERROR.
func noErrorLogged(t *testing.T, p *process) {
	t.Helper()
	for _, rec := range logRecords(p.stderr.String()) {
		require.NotEqual(t, "ERROR", rec["level"], "a relay logged an error: %v", rec)
	}
}

// TestPostgresReadOnlyFailover: the database turns read-only (as a fenced
// primary during a failover, or a replica before its promotion) and the
// relay's sessions are cut; its new sessions are read-only. /readyz says
// so, and once the database is writable again, rows committed since are
// relayed without a restart: no session that began read-only is kept.
func TestPostgresReadOnlyFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	dbURL := bridgetest.PostgresDatabase(t)
	name := databaseName(t, dbURL)
	e := newCrashEnvOn(t, dbURL, "outbox", n.URL(), 1)
	admin := postgresAdmin(t)
	owner := "failover-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	p := e.relay(t, owner, "BRIDGE_LOG_LEVEL=info")
	base := "http://" + relayHTTPAddr(t, p)
	e.insert(t, 0, 100)
	e.waitDone(t, 100, 60*time.Second, p)

	_, err := admin.Exec("ALTER DATABASE " + name + " SET default_transaction_read_only = on")
	require.NoError(t, err)
	readOnlyAt := time.Now()
	var cut int
	require.NoError(t, admin.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
		name, outbox.SessionName(owner)).Scan(&cut))
	require.Positive(t, cut, "the relay's sessions are named %q", outbox.SessionName(owner))

	// Committed while the database is read-only, by a transaction that
	// asks for READ WRITE.
	tx, err := e.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.Exec("SET TRANSACTION READ WRITE")
	require.NoError(t, err)
	_, err = tx.Exec(e.insertSQL(), 100, 200)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	var body string
	poll(t, 14*time.Second, func() bool {
		var code int
		code, body = httpGet(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "read-only")
	}, "/readyz never answered 503 saying the database is read-only; last answer: %s", stringRef{&body})

	// The failover takes 15 s; then the database is writable again.
	<-time.After(time.Until(readOnlyAt.Add(15 * time.Second)))
	_, err = admin.Exec("ALTER DATABASE " + name + " RESET default_transaction_read_only")
	require.NoError(t, err)
	e.insert(t, 200, 300)

	e.waitDone(t, 300, 30*time.Second, p)
	poll(t, 30*time.Second, func() bool {
		code, _ := httpGet(base + "/readyz")
		return code == http.StatusOK
	}, "/readyz never answered 200 after the database was writable again")
	e.verify(t, 300)
}

// TestPostgresSerializableDefault: with SERIALIZABLE as the database's
// default isolation, two relays relay every row exactly once and log no
// error: the relay runs its statements at READ COMMITTED.
func TestPostgresSerializableDefault(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	dbURL := bridgetest.PostgresDatabase(t)
	_, err := postgresAdmin(t).Exec("ALTER DATABASE " + databaseName(t, dbURL) + " SET default_transaction_isolation = serializable")
	require.NoError(t, err)
	e := newCrashEnvOn(t, dbURL, "outbox", n.URL(), 1)
	var level string
	require.NoError(t, e.db.QueryRow("SHOW default_transaction_isolation").Scan(&level))
	require.Equal(t, "serializable", level)

	const total = 3000
	e.insert(t, 0, total)
	small := []string{"BRIDGE_RELAY_BATCH_SIZE=100", "BRIDGE_RELAY_MAX_IN_FLIGHT=200"}
	a := e.relay(t, "serializable-a", small...)
	b := e.relay(t, "serializable-b", small...)
	e.waitDone(t, total, 120*time.Second, a, b)
	for _, r := range []*process{a, b} {
		require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, r.wait(t, 30*time.Second), "bridge run after SIGTERM\nstderr:\n%s", r.stderr)
		noErrorLogged(t, r)
	}
	e.verify(t, total)
}

// TestPgBouncerTransactionMode: through a real PgBouncer pooling in
// transaction mode — server sessions shared by turns, no protocol-level
// prepared statements (1.18) — migrate, enqueue, status, a producer's
// INSERT (docs/PRODUCERS.md; the producer module's own run through
// PgBouncer is internal/producerrelay's TestProducerThroughPgBouncer) and
// two relays all work; the relays say that notifications do
// not come through and poll. Then enqueue, status and a relay work
// through statement pooling too.
func TestPgBouncerTransactionMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct, table := bridgetest.PostgresTable(t)
	pooled := bridgetest.StartPgBouncer(t, direct, "transaction", 4)
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	dir := t.TempDir()
	env := []string{"BRIDGE_DATABASE_URL=" + pooled, "BRIDGE_DATABASE_TABLE=" + table}

	r := runBridge(t, dir, env, "migrate")
	require.Equal(t, 0, r.code, "bridge migrate\n%s", r)
	r = runBridge(t, dir, env, "migrate")
	require.Equal(t, 0, r.code, "bridge migrate again\n%s", r)
	require.Contains(t, r.stdout, "up to date")

	want := map[string]bool{}
	for i := range 10 {
		key := fmt.Sprintf("enqueued-%d", i)
		r := runBridge(t, dir, env, "enqueue", "--subject", "events.pool", "--key", key, "--data", "x")
		require.Equal(t, 0, r.code, "bridge enqueue %d\n%s", i, r)
		want[key] = true
	}
	st := status(t, dir, "--database-url", pooled, "--table", table)
	require.Equal(t, int64(10), st.Rows["pending"], "bridge status through the pooler")

	// A producer writes in the application's own transactions, with the
	// INSERT of docs/PRODUCERS.md; its pool uses the documented setting for
	// transaction pooling.
	appURL := pooled + "&default_query_exec_mode=cache_describe"
	app, err := sql.Open("pgx", appURL)
	require.NoError(t, err)
	t.Cleanup(func() { app.Close() })
	insert := "INSERT INTO " + table + " (idempotency_key, subject, payload, ordering_key) VALUES ($1, $2, $3, $4) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id"
	type event struct {
		key, ordering string
	}
	events := func(tx, per int, prefix string) []event {
		var out []event
		for i := range per {
			key := fmt.Sprintf("%s-%d-%d", prefix, tx, i)
			want[key] = true
			out = append(out, event{key, fmt.Sprintf("k%d", i%7)})
		}
		return out
	}
	for i := range 49 {
		tx, err := app.BeginTx(ctx, nil)
		require.NoError(t, err)
		for _, e := range events(i, 10, "sql") {
			var id int64
			require.NoError(t, tx.QueryRowContext(ctx, insert, e.key, "events.pool", []byte(e.key), e.ordering).Scan(&id),
				"INSERT through PgBouncer, transaction %d", i)
		}
		require.NoError(t, tx.Commit())
	}
	conn, err := pgx.Connect(ctx, appURL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	for i := range 50 {
		require.NoError(t, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, e := range events(i, 10, "pgx") {
				var id int64
				if err := tx.QueryRow(ctx, insert, e.key, "events.pool", []byte(e.key), e.ordering).Scan(&id); err != nil {
					return err
				}
			}
			return nil
		}), "INSERT through PgBouncer with pgx, transaction %d", i)
	}
	require.Len(t, want, 1000)

	relays := make([]*process, 2)
	for i := range relays {
		relays[i] = start(t, dir, append(env,
			"BRIDGE_NATS_URL="+n.URL(),
			"BRIDGE_HTTP_LISTEN=127.0.0.1:0",
			"BRIDGE_RELAY_OWNER=pooled-"+strconv.Itoa(i),
			"BRIDGE_RELAY_BATCH_SIZE=50",
			"BRIDGE_RELAY_POLL_INTERVAL=100ms",
			"BRIDGE_LOG_LEVEL=warn"), "run")
	}
	directDB, err := sql.Open("pgx", direct)
	require.NoError(t, err)
	t.Cleanup(func() { directDB.Close() })
	poll(t, 120*time.Second, func() bool {
		for _, p := range relays {
			require.False(t, p.exited(), "a relay exited (%d)\nstderr:\n%s", p.code, p.stderr)
		}
		var done int
		require.NoError(t, directDB.QueryRow("SELECT count(*) FROM "+table+" WHERE status = 'done'").Scan(&done))
		return done == 1000
	}, "the relays did not relay 1,000 rows through PgBouncer")
	for _, p := range relays {
		poll(t, 30*time.Second, func() bool {
			return strings.Contains(p.stderr.String(), "outbox notifications unavailable")
		}, "a relay never said that notifications are unavailable\nstderr:\n%s", p.stderr)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, p.wait(t, 30*time.Second), "bridge run after SIGTERM\nstderr:\n%s", p.stderr)
		noErrorLogged(t, p)
	}

	// Statement mode allows no transaction block: enqueue, status and the
	// relay run single statements at the default isolation.
	statement := bridgetest.StartPgBouncer(t, direct, "statement", 4)
	stmtEnv := []string{"BRIDGE_DATABASE_URL=" + statement, "BRIDGE_DATABASE_TABLE=" + table}
	for i := range 10 {
		key := fmt.Sprintf("statement-%d", i)
		r := runBridge(t, dir, stmtEnv, "enqueue", "--subject", "events.pool", "--key", key, "--data", "x")
		require.Equal(t, 0, r.code, "bridge enqueue through statement pooling\n%s", r)
		want[key] = true
	}
	st = status(t, dir, "--database-url", statement, "--table", table)
	require.Equal(t, int64(10), st.Rows["pending"], "bridge status through statement pooling")
	p := start(t, dir, append(stmtEnv, "BRIDGE_NATS_URL="+n.URL(), "BRIDGE_HTTP_LISTEN=127.0.0.1:0",
		"BRIDGE_RELAY_POLL_INTERVAL=100ms", "BRIDGE_LOG_LEVEL=warn"), "run")
	poll(t, 60*time.Second, func() bool {
		require.False(t, p.exited(), "the relay exited (%d)\nstderr:\n%s", p.code, p.stderr)
		var done int
		require.NoError(t, directDB.QueryRow("SELECT count(*) FROM "+table+" WHERE status = 'done'").Scan(&done))
		return done == len(want)
	}, "the relay did not relay through statement pooling")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 30*time.Second), "bridge run after SIGTERM\nstderr:\n%s", p.stderr)
	noErrorLogged(t, p)

	msgs := bridgetest.Messages(t, js, "EVENTS")
	require.Len(t, msgs, len(want), "one message per row")
	got := map[string]bool{}
	for _, m := range msgs {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		require.False(t, got[id], "message %s twice", id)
		require.True(t, want[id], "unexpected message %s", id)
		got[id] = true
	}
}

// TestMigrateMixedCaseTwice: a table name in mixed case (and a schema
// whose case differs from the one created) migrates once and is then up
// to date, on PostgreSQL, which folds unquoted names, and on MySQL, which
// keeps them; the MySQL URL is in go-sql-driver's DSN form.
func TestMigrateMixedCaseTwice(t *testing.T) {
	t.Parallel()
	pgURL, pgTable := bridgetest.PostgresTable(t)
	schema, _, _ := strings.Cut(pgTable, ".")
	myURL, myTable := bridgetest.MySQLTable(t)
	myDatabase, _, _ := strings.Cut(myTable, ".")
	u, err := url.Parse(myURL)
	require.NoError(t, err)
	myDSN := "mysql://" + u.User.String() + "@tcp(" + u.Host + ")" + u.Path + "?" + u.RawQuery
	for _, c := range []struct {
		name, url string
		tables    []string
	}{
		{"postgres", pgURL, []string{schema + ".Shop_Outbox", strings.ToUpper(schema) + ".SHOP_OUTBOX", schema + ".shop_outbox"}},
		{"mysql", myDSN, []string{myDatabase + ".Shop_Outbox", myDatabase + ".Shop_Outbox"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, table := range c.tables {
				r := runBridge(t, dir, nil, "migrate", "--database-url", c.url, "--table", table)
				require.Equal(t, 0, r.code, "bridge migrate --table %s (run %d)\n%s", table, i+1, r)
				if i == 0 {
					require.Contains(t, r.stdout, "applied migration 00001", "first run")
				} else {
					require.Contains(t, r.stdout, "up to date", "run %d with %s", i+1, table)
				}
				r = runBridge(t, dir, nil, "enqueue", "--database-url", c.url, "--table", table, "--subject", "events.case", "--data", "x")
				require.Equal(t, 0, r.code, "bridge enqueue --table %s\n%s", table, r)
			}
		})
	}
}

// silentServer accepts TCP connections and never answers on them, as a
// database host whose server hangs (or a proxy in front of a dead one)
// does. It returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestDatabaseThatNeverAnswers: the database accepts the connection and
// says nothing. `bridge run` does not hang in its first start: each try
// gives up after database.connect_timeout, is logged, and /readyz names
// the database.
func TestDatabaseThatNeverAnswers(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			addr := silentServer(t)
			dbURL := "postgres://u:p@" + addr + "/db?sslmode=disable"
			if kind == "mysql" {
				dbURL = "mysql://u:p@" + addr + "/db"
			}
			env := []string{"BRIDGE_DATABASE_URL=" + dbURL, "BRIDGE_NATS_URL=" + n.URL(), "BRIDGE_DATABASE_CONNECT_TIMEOUT=500ms"}
			r := runWaiting(t, t.TempDir(), env, []string{"run", "--http-listen", "127.0.0.1:0"},
				"connect to "+kind+" ", addr, "relay cannot start yet")
			require.GreaterOrEqual(t, strings.Count(r.stderr, "relay cannot start yet"), 1)
		})
	}
}

// TestDatabaseStopsAnsweringMidRun: the server stops answering the relay's
// sessions (packets held, sockets open: a hung server, a black-holed
// network) while new connections reach a server that answers, as after a
// failover behind a proxy or a DNS name. Every statement has a deadline:
// the relay gives the frozen sessions up, opens new ones and relays the
// rows committed meanwhile within 30 s, without a restart; /healthz stays
// 200. Before, a claim waited on its frozen session forever.
func TestDatabaseStopsAnsweringMidRun(t *testing.T) {
	t.Parallel()
	direct, table := bridgetest.PostgresTable(t)
	u, err := url.Parse(direct)
	require.NoError(t, err)
	proxy := bridgetest.StartProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = proxy.Addr()
	n := bridgetest.StartNATS(t)
	e := newCrashEnvOn(t, direct, table, n.URL(), 1)
	e.dbURL = viaProxy.String()
	p := e.relay(t, "frozen-"+strconv.FormatInt(time.Now().UnixNano(), 36), "BRIDGE_LOG_LEVEL=info")
	base := "http://" + relayHTTPAddr(t, p)
	e.insert(t, 0, 50)
	e.waitDone(t, 50, 60*time.Second, p)

	proxy.FreezeOpen()
	e.insert(t, 50, 250)
	e.waitDone(t, 250, 30*time.Second, p)
	code, body := httpGet(base + "/healthz")
	require.Equal(t, http.StatusOK, code, "/healthz: %s", body)
	e.verify(t, 250)
}

// TestReadinessFollowsClaims: the relay's role may read the table but not
// update it (permission denied, 42501): the database answers and is
// writable, but every claim fails. /readyz answers 503 naming the error
// under "outbox", and /healthz stays 200 (a restart would not help).
// Before, /readyz said 200 while a row stayed pending.
func TestReadinessFollowsClaims(t *testing.T) {
	t.Parallel()
	admin, table := bridgetest.PostgresTable(t)
	n := bridgetest.StartNATS(t)
	e := newCrashEnvOn(t, admin, table, n.URL(), 1)
	role := "reader_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	schema, _, _ := strings.Cut(table, ".")
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT ON " + table + " TO " + role,
	} {
		_, err := e.db.Exec(stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() {
		_, _ = e.db.Exec("DROP OWNED BY " + role)
		_, _ = e.db.Exec("DROP ROLE " + role)
	})
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.User = url.User(role)
	e.dbURL = u.String()
	p := e.relay(t, "reader", "BRIDGE_LOG_LEVEL=info")
	base := "http://" + relayHTTPAddr(t, p)
	e.insert(t, 0, 1)
	var body string
	poll(t, 30*time.Second, func() bool {
		var code int
		code, body = httpGet(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, `"outbox":"claims failing`) && strings.Contains(body, "42501")
	}, "/readyz never answered 503 naming the failing claims; last answer: %s", stringRef{&body})
	code, health := httpGet(base + "/healthz")
	require.Equal(t, http.StatusOK, code, "/healthz: %s", health)
}

// A database URL that names no database of its server is input the user
// fixes (exit 2, as a mistyped SQLite path is), and the message says what to
// create, with the password redacted. bridge migrate creates tables, never
// the database. run waits instead: a database may be created after its
// relay is deployed.
func TestUnknownDatabaseIsNamed(t *testing.T) {
	t.Parallel()
	const password = "sekrit-3b8d"
	missing := "bridge_missing_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	urls := map[string]string{}
	pg, err := url.Parse(bridgetest.PostgresURL(t))
	require.NoError(t, err)
	pg.Path, pg.User = "/"+missing, url.UserPassword(pg.User.Username(), password)
	urls["postgres"] = pg.String()
	my, err := url.Parse(bridgetest.MySQLURL(t))
	require.NoError(t, err)
	my.Path = "/" + missing
	urls["mysql"] = my.String()
	// A URL without a database: PostgreSQL takes the user's name for it.
	admin := postgresAdmin(t)
	_, err = admin.Exec("CREATE ROLE " + missing + " LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec("DROP ROLE " + missing) })
	unnamed := *pg
	unnamed.Path, unnamed.User = "/", url.User(missing)
	urls["postgres-user"] = unnamed.String()
	want := map[string]string{
		"postgres":      `create it (CREATE DATABASE "` + missing + `")`,
		"postgres-user": `create it (CREATE DATABASE "` + missing + `")`,
		"mysql":         "create it (CREATE DATABASE `" + missing + "`)",
	}
	for dialect, dbURL := range urls {
		for _, command := range []string{"migrate", "status"} {
			t.Run(dialect+"/"+command, func(t *testing.T) {
				t.Parallel()
				r := runBridge(t, t.TempDir(), environ("BRIDGE_DATABASE_URL="+dbURL), command)
				require.Equal(t, 2, r.code, "bridge %s on a database that does not exist\n%s", command, r)
				require.Contains(t, r.stderr, "the database does not exist: "+want[dialect], "%s", r)
				require.NotContains(t, r.stderr+r.stdout, password, "the password was printed\n%s", r)
			})
		}
	}
}
