package main

// Production setups, with the real binary against real servers: mutual
// TLS, operator-mode credentials, secrets kept out of every output, and the
// operational HTTP endpoints while the NATS server goes away and comes
// back.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// relayHTTPAddr waits until the relay logs "relay running" (at info) and
// returns the address of its HTTP server from that line, so a relay may
// listen on 127.0.0.1:0.
func relayHTTPAddr(t *testing.T, p *process) string {
	t.Helper()
	var addr string
	poll(t, 60*time.Second, func() bool {
		require.False(t, p.exited(), "bridge run exited with %d before it was running\nstderr:\n%s", p.code, p.stderr)
		for _, rec := range logRecords(p.stderr.String()) {
			if rec["msg"] == "relay running" {
				addr, _ = rec["http"].(string)
				return addr != ""
			}
		}
		return false
	}, "bridge run never logged \"relay running\"\nstderr:\n%s", p.stderr)
	return addr
}

// natsClient connects a test client (closed at the end of the test) and
// returns its JetStream context.
func natsClient(t *testing.T, natsURL string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(natsURL, opts...)
	require.NoError(t, err, "test client connects to %s", natsURL)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// waitStreamMessages waits until stream holds want messages and returns
// them in sequence order.
func waitStreamMessages(t *testing.T, js jetstream.JetStream, stream string, want int) []jetstream.Msg {
	t.Helper()
	poll(t, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return false
		}
		return s.CachedInfo().State.Msgs >= uint64(want)
	}, "stream %s never held %d messages", stream, want)
	msgs := bridgetest.Messages(t, js, stream)
	require.Len(t, msgs, want, "stream %s", stream)
	return msgs
}

// httpGet returns the status code and body of GET u, or -1 when the
// request fails.
func httpGet(u string) (int, string) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(u)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestTLSClientCertificates(t *testing.T) {
	t.Parallel()
	pki := bridgetest.NewTLSFiles(t)
	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
			CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CaFile: pki.CA, Verify: true,
		})
		require.NoError(t, err)
		o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tc, true, true, 5
	})
	natsURL := fmt.Sprintf("tls://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port)
	dir := t.TempDir()
	db := []string{"BRIDGE_DATABASE_URL=" + bridgetest.SQLiteURL(t)}
	caOnly := append(db, "BRIDGE_NATS_URL="+natsURL, "BRIDGE_NATS_TLS_CA_FILE="+pki.CA)
	mTLS := append(append([]string(nil), caOnly...),
		"BRIDGE_NATS_TLS_CERT_FILE="+pki.ClientCert, "BRIDGE_NATS_TLS_KEY_FILE="+pki.ClientKey)

	// The relay migrates only the embedded default database.
	r := runBridge(t, dir, db, "migrate")
	require.Equal(t, 0, r.code, "bridge migrate\n%s", r)

	t.Run("without client certificate", func(t *testing.T) {
		// The server's refusal reaches the client either as its "certificate
		// required" alert or as a connection closed after the handshake,
		// depending on timing. Either way the relay keeps trying, and each
		// attempt's log line says what to set.
		runWaiting(t, dir, caOnly, []string{"run", "--ensure-stream", "EVENTS:events.>", "--http-listen", "127.0.0.1:0"},
			"connect to NATS at "+natsURL, "no client certificate is configured", "nats.tls.cert_file", `"attempt":2`)
	})

	run := start(t, dir, mTLS, "run", "--ensure-stream", "EVENTS:events.>", "--http-listen", "127.0.0.1:0")
	relayHTTPAddr(t, run)
	r = runBridge(t, dir, db, "enqueue", "--subject", "events.tls", "--key", "tls-1", "--data", "over mutual TLS")
	require.Equal(t, 0, r.code, "bridge enqueue\n%s", r)

	js := natsClient(t, natsURL, nats.RootCAs(pki.CA), nats.ClientCert(pki.ClientCert, pki.ClientKey))
	msgs := waitStreamMessages(t, js, "EVENTS", 1)
	require.Equal(t, "over mutual TLS", string(msgs[0].Data()))
	require.Equal(t, "events.tls", msgs[0].Subject())
	require.Equal(t, "tls-1", msgs[0].Headers().Get(jetstream.MsgIDHeader))

	require.NoError(t, run.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, run.wait(t, 30*time.Second), "bridge run after SIGTERM\nstderr:\n%s", run.stderr)
}

func TestCredsFile(t *testing.T) {
	t.Parallel()
	op := bridgetest.NewOperator(t)
	srv := bridgetest.StartNATSWithOptions(t, op.Configure)
	creds := op.WriteCreds(t)
	natsURL := srv.ClientURL()
	dir := t.TempDir()
	db := []string{"BRIDGE_DATABASE_URL=" + bridgetest.SQLiteURL(t)}
	r := runBridge(t, dir, db, "migrate")
	require.Equal(t, 0, r.code, "bridge migrate\n%s", r)

	t.Run("without credentials", func(t *testing.T) {
		// Credentials can be provisioned after the relay starts: it keeps
		// trying, saying why, and that it waits for them on purpose.
		runWaiting(t, dir, append(db, "BRIDGE_NATS_URL="+natsURL), []string{"run", "--ensure-stream", "EVENTS:events.>", "--http-listen", "127.0.0.1:0"},
			"connect to NATS", "uthorization", "the server refused the user or password: tried again in case they are being rotated")
	})

	run := start(t, dir, append(db, "BRIDGE_NATS_URL="+natsURL, "BRIDGE_NATS_CREDS_FILE="+creds),
		"run", "--ensure-stream", "EVENTS:events.>", "--http-listen", "127.0.0.1:0")
	relayHTTPAddr(t, run)
	r = runBridge(t, dir, db, "enqueue", "--subject", "events.creds", "--key", "creds-1", "--data", "as an operator-mode user")
	require.Equal(t, 0, r.code, "bridge enqueue\n%s", r)

	js := natsClient(t, natsURL, nats.UserCredentials(creds))
	msgs := waitStreamMessages(t, js, "EVENTS", 1)
	require.Equal(t, "as an operator-mode user", string(msgs[0].Data()))
	require.Equal(t, "creds-1", msgs[0].Headers().Get(jetstream.MsgIDHeader))

	require.NoError(t, run.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, run.wait(t, 30*time.Second), "bridge run after SIGTERM\nstderr:\n%s", run.stderr)
	require.NotContains(t, run.stderr.String()+run.stdout.String(), op.UserSeed)
}

// pgRole creates a login role with a password, allowed to create the outbox
// in the schema of table, and returns a database URL that logs in as it.
// The role and what it owns are dropped when the test ends.
func pgRole(t *testing.T, adminURL, table, password string) string {
	t.Helper()
	admin, err := sql.Open("pgx", adminURL)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	role := "bridge_t_" + randomToken(t, 6)
	schema, _, _ := strings.Cut(table, ".")
	_, err = admin.Exec("CREATE ROLE " + role + " LOGIN PASSWORD '" + password + "'")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec("DROP OWNED BY " + role)
		_, _ = admin.Exec("DROP ROLE " + role)
	})
	_, err = admin.Exec("GRANT USAGE, CREATE ON SCHEMA " + schema + " TO " + role)
	require.NoError(t, err)
	u, err := url.Parse(adminURL)
	require.NoError(t, err)
	u.User = url.UserPassword(role, password)
	return u.String()
}

func randomToken(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// TestSecretsNeverPrinted runs every command that touches the database or
// NATS, successful and failing, with a database password and a NATS token
// or nkey seed, and checks that no secret appears in any output.
func TestSecretsNeverPrinted(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"token", "nkey seed"} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			adminURL, table := bridgetest.PostgresTable(t)
			password := "pw" + randomToken(t, 12)
			dbURL := pgRole(t, adminURL, table, password)
			secrets := map[string]string{"database password": password}

			var natsAuth []string
			var srv *server.Server
			switch method {
			case "token":
				token := "tok" + randomToken(t, 12)
				secrets["NATS token"] = token
				srv = bridgetest.StartNATSWithOptions(t, func(o *server.Options) { o.Authorization = token })
				natsAuth = []string{"BRIDGE_NATS_TOKEN=" + token}
			case "nkey seed":
				user := bridgetest.NewNkeyUser(t)
				seedFile := user.WriteSeed(t)
				content, err := os.ReadFile(seedFile)
				require.NoError(t, err)
				secrets["nkey seed"] = user.Seed
				secrets["seed file contents"] = strings.TrimSpace(string(content))
				// The seed without its "SU" prefix, in case some output
				// cuts it.
				secrets["nkey seed body"] = user.Seed[2:]
				srv = bridgetest.StartNATSWithOptions(t, user.Configure)
				natsAuth = []string{"BRIDGE_NATS_NKEY_SEED_FILE=" + seedFile}
			}
			natsURL := srv.ClientURL()
			env := append([]string{
				"BRIDGE_DATABASE_URL=" + dbURL,
				"BRIDGE_DATABASE_TABLE=" + table,
				"BRIDGE_NATS_URL=" + natsURL,
				"BRIDGE_HTTP_LISTEN=127.0.0.1:0",
			}, natsAuth...)
			dir := t.TempDir()

			type output struct{ what, text string }
			var outputs []output
			record := func(what string, r result) result {
				outputs = append(outputs, output{what, r.stdout + r.stderr})
				return r
			}

			r := record("migrate", runBridge(t, dir, env, "migrate", "--log-level", "debug"))
			require.Equal(t, 0, r.code, "bridge migrate\n%s", r)
			r = record("enqueue", runBridge(t, dir, env, "enqueue", "--subject", "events.secret", "--key", "s-1", "--data", "x", "--log-level", "debug"))
			require.Equal(t, 0, r.code, "bridge enqueue\n%s", r)

			run := start(t, dir, env, "run", "--log-level", "debug", "--ensure-stream", "EVENTS:events.>")
			relayHTTPAddr(t, run)
			var opts []nats.Option
			if method == "token" {
				opts = append(opts, nats.Token(secrets["NATS token"]))
			} else {
				opt, err := nats.NkeyOptionFromSeed(strings.TrimPrefix(natsAuth[0], "BRIDGE_NATS_NKEY_SEED_FILE="))
				require.NoError(t, err)
				opts = append(opts, opt)
			}
			js := natsClient(t, natsURL, opts...)
			msgs := waitStreamMessages(t, js, "EVENTS", 1)
			require.Equal(t, "s-1", msgs[0].Headers().Get(jetstream.MsgIDHeader))
			poll(t, 30*time.Second, func() bool {
				st := runBridge(t, dir, env, "status", "--json")
				require.Equal(t, 0, st.code, "bridge status --json\n%s", st)
				return strings.Contains(st.stdout, `"done": 1`)
			}, "the row never became done")
			require.NoError(t, run.cmd.Process.Signal(syscall.SIGTERM))
			require.Equal(t, 0, run.wait(t, 30*time.Second), "bridge run after SIGTERM\nstderr:\n%s", run.stderr)
			outputs = append(outputs, output{"run --log-level debug", run.stdout.String() + run.stderr.String()})
			require.Contains(t, run.stderr.String(), `"level":"DEBUG"`, "the relay logged at debug")

			r = record("config", runBridge(t, dir, env, "config"))
			require.Equal(t, 0, r.code, "bridge config\n%s", r)
			require.Contains(t, r.stdout, "REDACTED", "bridge config\n%s", r)
			r = record("status", runBridge(t, dir, env, "status", "--log-level", "debug"))
			require.Equal(t, 0, r.code, "bridge status\n%s", r)
			r = record("status --json", runBridge(t, dir, env, "status", "--json", "--log-level", "debug"))
			require.Equal(t, 0, r.code, "bridge status --json\n%s", r)
			r = record("enqueue again", runBridge(t, dir, env, "enqueue", "--subject", "events.secret", "--key", "s-1", "--data", "x", "--log-level", "debug"))
			require.Equal(t, 0, r.code, "second bridge enqueue\n%s", r)
			r = record("run --check-config", runBridge(t, dir, env, "run", "--check-config", "--log-level", "debug"))
			require.Equal(t, 0, r.code, "bridge run --check-config\n%s", r)

			// Failures print what went wrong; still no secret.
			wrongNATS := append(append([]string(nil), env...), fmt.Sprintf("BRIDGE_NATS_URL=nats://127.0.0.1:%d", freePort(t)))
			// run waits for a NATS server or a database it cannot reach.
			r = record("run with a wrong NATS port", runWaiting(t, dir, wrongNATS, []string{"run", "--log-level", "debug", "--http-listen", "127.0.0.1:0"}, "connect to NATS"))

			wrongDB := append(append([]string(nil), env...), "BRIDGE_DATABASE_URL="+strings.Replace(dbURL, ":5432/", fmt.Sprintf(":%d/", freePort(t)), 1))
			require.NotEqual(t, dbURL, wrongDB[len(wrongDB)-1], "the database URL names port 5432")
			r = record("run with a wrong database port", runWaiting(t, dir, wrongDB, []string{"run", "--log-level", "debug", "--http-listen", "127.0.0.1:0"}, "connect"))
			r = record("status with a wrong database port", runBridge(t, dir, wrongDB, "status", "--log-level", "debug"))
			require.Equal(t, 1, r.code, "bridge status with a wrong database port\n%s", r)

			badScheme := append(append([]string(nil), env...), "BRIDGE_DATABASE_URL=postgress"+strings.TrimPrefix(dbURL, "postgres"))
			r = record("config with a bad database URL", runBridge(t, dir, badScheme, "config"))
			require.Equal(t, 2, r.code, "bridge config with a bad database URL\n%s", r)
			require.Contains(t, r.stderr, "database.url", "bridge config with a bad database URL\n%s", r)

			twoMethods := append(append([]string(nil), env...), "BRIDGE_NATS_USER=bridge", "BRIDGE_NATS_PASSWORD="+password)
			if method == "nkey seed" {
				twoMethods = append(twoMethods[:len(twoMethods)-2], "BRIDGE_NATS_TOKEN="+password)
			}
			r = record("run with two NATS auth methods", runBridge(t, dir, twoMethods, "run", "--check-config"))
			require.Equal(t, 2, r.code, "bridge run --check-config with two NATS auth methods\n%s", r)

			// The password as a query parameter, as libpq also takes it.
			u, err := url.Parse(dbURL)
			require.NoError(t, err)
			u.User = url.User(u.User.Username())
			q := u.Query()
			q.Set("password", password)
			u.RawQuery = q.Encode()
			inQuery := append(append([]string(nil), env...), "BRIDGE_DATABASE_URL="+u.String())
			r = record("status with the password in the query", runBridge(t, dir, inQuery, "status", "--log-level", "debug"))
			require.Equal(t, 0, r.code, "bridge status with the password in the query\n%s", r)
			r = record("config with the password in the query", runBridge(t, dir, inQuery, "config"))
			require.Equal(t, 0, r.code, "bridge config with the password in the query\n%s", r)
			u.Host = fmt.Sprintf("127.0.0.1:%d", freePort(t))
			inQuery[len(inQuery)-1] = "BRIDGE_DATABASE_URL=" + u.String()
			r = record("run with the password in the query and a wrong database port", runWaiting(t, dir, inQuery, []string{"run", "--log-level", "debug", "--http-listen", "127.0.0.1:0"}, "connect"))

			switch method {
			case "token":
				// A token in the URL's userinfo, as nats.go also accepts it.
				inURL := append(append([]string(nil), env...), fmt.Sprintf("BRIDGE_NATS_URL=nats://%s@127.0.0.1:%d", secrets["NATS token"], freePort(t)))
				r = record("config with a token in the NATS URL", runBridge(t, dir, inURL, "config"))
				require.Equal(t, 0, r.code, "bridge config with a token in the NATS URL\n%s", r)
				r = record("run with a token in the NATS URL", runWaiting(t, dir, inURL, []string{"run", "--log-level", "debug", "--http-listen", "127.0.0.1:0"}, "connect to NATS"))
			case "nkey seed":
				seed := secrets["nkey seed"]
				corrupt := seed[:len(seed)-4] + strings.Map(func(r rune) rune { return 'A' + (r-'A'+1)%26 }, seed[len(seed)-4:])
				secrets["corrupt seed"] = corrupt
				badFile := filepath.Join(t.TempDir(), "bad.nk")
				require.NoError(t, os.WriteFile(badFile, []byte(corrupt+"\n"), 0o600))
				bad := append(append([]string(nil), env...), "BRIDGE_NATS_NKEY_SEED_FILE="+badFile)
				r = record("run with a corrupt seed file", runBridge(t, dir, bad, "run", "--log-level", "debug", "--http-listen", "127.0.0.1:0"))
				require.Equal(t, 2, r.code, "bridge run with a corrupt seed file is bad configuration\n%s", r)
				require.Contains(t, r.stderr, "nats.nkey_seed_file", "bridge run with a corrupt seed file\n%s", r)
			}

			for _, o := range outputs {
				for name, secret := range secrets {
					require.NotContains(t, o.text, secret, "bridge %s printed the %s", o.what, name)
				}
			}
		})
	}
}

// metric reads an unlabelled sample of Prometheus text; ok is false when
// the metric is missing.
func metric(text, name string) (value float64, ok bool) {
	for _, line := range strings.Split(text, "\n") {
		if v, found := strings.CutPrefix(line, name+" "); found {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

func TestMetricsAndReadiness(t *testing.T) {
	t.Parallel()
	n := bridgetest.StartNATS(t)
	dir := t.TempDir()
	env := []string{"BRIDGE_DATABASE_URL=" + bridgetest.SQLiteURL(t), "BRIDGE_NATS_URL=" + n.URL()}
	r := runBridge(t, dir, env, "migrate")
	require.Equal(t, 0, r.code, "bridge migrate\n%s", r)
	run := start(t, dir, env, "run", "--ensure-stream", "EVENTS:events.>", "--http-listen", "127.0.0.1:0")
	base := "http://" + relayHTTPAddr(t, run)

	status := func(path string) int {
		code, _ := httpGet(base + path)
		return code
	}
	metrics := func() string {
		code, body := httpGet(base + "/metrics")
		require.Equal(t, http.StatusOK, code, "GET /metrics: %s", body)
		return body
	}
	requireMetric := func(text, name string, want float64) {
		t.Helper()
		v, ok := metric(text, name)
		require.True(t, ok, "/metrics has no %s\n%s", name, text)
		require.Equal(t, want, v, "%s", name)
	}
	waitMetric := func(name string, want float64) {
		t.Helper()
		poll(t, 30*time.Second, func() bool {
			v, _ := metric(metrics(), name)
			return v == want
		}, "%s never reached %v", name, want)
	}

	require.Equal(t, http.StatusOK, status("/healthz"))
	poll(t, 30*time.Second, func() bool { return status("/readyz") == http.StatusOK }, "/readyz never answered 200")
	m := metrics()
	requireMetric(m, "bridge_rows_relayed_total", 0)
	requireMetric(m, "bridge_rows_deduplicated_total", 0)
	requireMetric(m, "bridge_inflight_rows", 0)
	requireMetric(m, "bridge_inflight_bytes", 0)
	goroutines, ok := metric(m, "go_goroutines")
	require.True(t, ok, "/metrics has no go_goroutines\n%s", m)
	require.Positive(t, goroutines)

	// A message already in the stream under the key of a later row: that
	// row's PubAck says duplicate.
	_, js := n.JetStream(t)
	_, err := js.Publish(context.Background(), "events.metrics", []byte("published before"), jetstream.WithMsgID("m-dup"))
	require.NoError(t, err)

	const rows = 5
	for i := range rows - 1 {
		r := runBridge(t, dir, env, "enqueue", "--subject", "events.metrics", "--key", fmt.Sprintf("m-%d", i), "--data", "x")
		require.Equal(t, 0, r.code, "bridge enqueue\n%s", r)
	}
	r = runBridge(t, dir, env, "enqueue", "--subject", "events.metrics", "--key", "m-dup", "--data", "x")
	require.Equal(t, 0, r.code, "bridge enqueue\n%s", r)
	waitMetric("bridge_rows_relayed_total", rows)
	m = metrics()
	requireMetric(m, "bridge_rows_deduplicated_total", 1)
	requireMetric(m, "bridge_inflight_rows", 0)
	requireMetric(m, "bridge_inflight_bytes", 0) // every settled row gave its bytes back
	require.Contains(t, m, "watermill_handler_execution_time_seconds_count{", "Watermill's router metrics")
	waitStreamMessages(t, js, "EVENTS", rows) // four new messages and the one published before

	n.Stop()
	var body string
	poll(t, 30*time.Second, func() bool {
		var code int
		code, body = httpGet(base + "/readyz")
		return code == http.StatusServiceUnavailable
	}, "/readyz never answered 503 while the NATS server was stopped")
	require.Contains(t, body, "nats", "/readyz names the failing check: %s", body)
	require.Equal(t, http.StatusOK, status("/healthz"), "/healthz while NATS is stopped")

	n.Restart(t)
	poll(t, 60*time.Second, func() bool { return status("/readyz") == http.StatusOK }, "/readyz never answered 200 after the NATS server restarted")
	require.Equal(t, http.StatusOK, status("/healthz"))

	r = runBridge(t, dir, env, "enqueue", "--subject", "events.metrics", "--key", "m-after", "--data", "x")
	require.Equal(t, 0, r.code, "bridge enqueue\n%s", r)
	waitMetric("bridge_rows_relayed_total", rows+1)

	require.NoError(t, run.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, run.wait(t, 30*time.Second), "bridge run after SIGTERM\nstderr:\n%s", run.stderr)
}
