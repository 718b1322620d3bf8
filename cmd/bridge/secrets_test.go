package main

// A property test of redaction: passwords made of every printable ASCII
// special character, in the database and NATS URLs (and the other places
// a secret is configured), through every command that reads them, with
// URLs that parse and URLs that do not; no output may hold any three
// characters of the password in a row.

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// specials are the printable ASCII characters that are neither letters
// nor digits, space included.
const specials = " !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// markers are the letters between the specials of a generated password.
// Outputs do not hold them next to special characters, so a window of the
// password that has one cannot be found in an output by chance: only a
// leak puts it there.
const markers = "QX"

// newPassword returns every special character once, in random order, in
// pairs with a marker letter before each pair ("Q#/X?@…"): every
// character is tried next to others, and every three characters in a row
// hold a marker.
func newPassword(rng *rand.Rand) string {
	s := []byte(specials)
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	var b strings.Builder
	for i := 0; i < len(s); i += 2 {
		b.WriteByte(markers[rng.IntN(len(markers))])
		b.Write(s[i:min(i+2, len(s))])
	}
	return b.String()
}

// userinfoSpecials are the characters other than letters and digits that
// Go's net/url accepts as written in a URL's userinfo ('%' aside, which
// starts an escape). Parsers disagree on '@': net/url and go-sql-driver end
// the userinfo at the last one, libpq and pgx at the first.
const userinfoSpecials = "-._~!$&'()*+,;=:@"

// newUserinfoPassword returns a password of the characters of
// userinfoSpecials, an '@' always among them, in random order and in pairs
// with a marker letter before each pair, as newPassword: a URL holding it
// as written parses, so only a check of its text can refuse it.
func newUserinfoPassword(rng *rand.Rand) string {
	s := []byte(userinfoSpecials)
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	var b strings.Builder
	for i := 0; i < len(s); i += 2 {
		b.WriteByte(markers[rng.IntN(len(markers))])
		b.Write(s[i:min(i+2, len(s))])
	}
	return b.String()
}

// leaks returns the windows of three characters of password, and of the
// forms it takes in URLs and in quoted or JSON strings, that output holds.
// A window counts when it holds a marker and a character other than a
// letter or digit: a window of a percent-encoded form such as "7DQ" (from
// "%7DQ") can be part of a NATS server's id by chance.
func leaks(output, password string) []string {
	forms := []string{password, url.PathEscape(password), url.QueryEscape(password),
		url.UserPassword("u", password).String()[2:], escape(password), strconv.Quote(password)}
	for _, html := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		_ = enc.Encode(password)
		forms = append(forms, strings.TrimSpace(b.String()))
	}
	var found []string
	for _, f := range forms {
		for i := 0; i+3 <= len(f); i++ {
			w := f[i : i+3]
			if strings.ContainsAny(w, markers) && strings.ContainsFunc(w, notAlnum) && strings.Contains(output, w) && !strings.Contains(strings.Join(found, "\x00"), w) {
				found = append(found, w)
			}
		}
	}
	return found
}

// TestLeaksFindsEveryForm checks the check: a password printed as is,
// percent-encoded, quoted or in JSON is found.
func TestLeaksFindsEveryForm(t *testing.T) {
	t.Parallel()
	pw := newPassword(rand.New(rand.NewPCG(1, 2)))
	require.Len(t, pw, len(specials)+(len(specials)+1)/2)
	for _, shown := range []string{pw, url.PathEscape(pw), url.QueryEscape(pw), strconv.Quote(pw), string(mustJSON(t, pw)),
		"invalid port \":" + pw[:4] + "\" after host"} {
		require.NotEmpty(t, leaks("bridge: "+shown+"\n", pw), "%s", shown)
	}
	require.Empty(t, leaks(`bridge: invalid config: database.url: "postgres://app:REDACTED@db:5432/app": must be a valid URL`, pw))
}

func notAlnum(r rune) bool {
	return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// secretCase is one way a password reaches the bridge.
type secretCase struct {
	name string
	// setup returns the BRIDGE_* variables that hold password, and what
	// the commands should do with them.
	setup func(t *testing.T, password string) ([]string, outcome)
	// password makes the case's password. Defaults to newPassword.
	password func(rng *rand.Rand) string
}

// outcome is what the commands of a case should do.
type outcome int

const (
	refused  outcome = iota // every command refuses the configuration: exit 2
	works                   // the relay runs and the outbox commands succeed
	anything                // only that nothing leaks (unreachable servers, forms other helpers may accept)
)

// TestSecretsNeverPrintedProperty runs every command that reads the
// database or NATS configuration (config, run --check-config, migrate,
// enqueue, status, requeue, retry, purge, tail, run) at debug level, with
// a generated password in each place a secret is configured, and checks
// that no output holds three characters of it in a row. The seed is
// logged; BRIDGE_TEST_SECRET_SEED reruns one.
func TestSecretsNeverPrintedProperty(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("BRIDGE_TEST_SECRET_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("passwords from seed %d (rerun with BRIDGE_TEST_SECRET_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	for _, c := range secretCases() {
		password := newPassword(rng)
		if c.password != nil {
			password = c.password(rng)
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env, want := c.setup(t, password)
			env = append(env, "BRIDGE_HTTP_LISTEN=127.0.0.1:0")
			dir := t.TempDir()
			for _, o := range runEveryCommand(t, dir, env, want) {
				if found := leaks(o.text, password); len(found) > 0 {
					t.Errorf("bridge %s printed %q of the password %q:\n%s", o.what, found, password, o.text)
				}
			}
		})
	}
}

// secretCases are the places a password is configured, in URLs that parse
// and URLs that do not.
func secretCases() []secretCase {
	return []secretCase{
		{"postgres, password as written in the URL", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := postgresWithPassword(t, pw)
			raw := strings.Replace(u.String(), u.User.String(), u.User.Username()+":"+pw, 1)
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+raw, "BRIDGE_DATABASE_TABLE="+table), refused
		}, nil},
		// Passwords whose URL parses as written, an unencoded '@' in them:
		// pgx read the host from after the first '@' and printed the rest
		// of the password in its error ("lookup xcret3@127.0.0.1: no such
		// host").
		{"postgres, password that parses as written, with an @", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := postgresWithPassword(t, pw)
			raw := strings.Replace(u.String(), u.User.String(), u.User.Username()+":"+pw, 1)
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+raw, "BRIDGE_DATABASE_TABLE="+table), refused
		}, newUserinfoPassword},
		{"wal.replication_url, password that parses as written, with an @", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := postgresWithPassword(t, pw)
			raw := strings.Replace(u.String(), u.User.String(), u.User.Username()+":"+pw, 1)
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+u.String(), "BRIDGE_DATABASE_TABLE="+table,
				"BRIDGE_WAL_REPLICATION_URL="+raw, "BRIDGE_SOURCE=postgres-wal"), refused
		}, newUserinfoPassword},
		{"mysql, password that parses as written, with an @", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := mysqlWithPassword(t, pw)
			raw := strings.Replace(u.String(), u.User.String(), u.User.Username()+":"+pw, 1)
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+raw, "BRIDGE_DATABASE_TABLE="+table), refused
		}, newUserinfoPassword},
		{"nats, password that parses as written, with an @", func(t *testing.T, pw string) ([]string, outcome) {
			srv := natsWithUser(t, pw)
			return append(sqliteOutbox(t), fmt.Sprintf("BRIDGE_NATS_URL=nats://app:%s@%s", pw, srv.Addr())), refused
		}, newUserinfoPassword},
		{"postgres, password percent-encoded in the URL", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := postgresWithPassword(t, pw)
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+u.String(), "BRIDGE_DATABASE_TABLE="+table), works
		}, nil},
		{"postgres, password percent-encoded in the query", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := postgresWithPassword(t, pw)
			q := u.Query()
			q.Set("password", pw)
			u.User, u.RawQuery = url.User(u.User.Username()), q.Encode()
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+u.String(), "BRIDGE_DATABASE_TABLE="+table), works
		}, nil},
		// pgx decodes the names of the query's parameters too.
		{"postgres, password in the query under a percent-encoded name", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := postgresWithPassword(t, pw)
			u.User = url.User(u.User.Username())
			u.RawQuery += "&pass%77ord=" + url.QueryEscape(pw)
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+u.String(), "BRIDGE_DATABASE_TABLE="+table), works
		}, nil},
		{"postgres, password percent-encoded, source watermill-forwarder", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := postgresWithPassword(t, pw)
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+u.String(), "BRIDGE_DATABASE_TABLE="+table,
				"BRIDGE_SOURCE=watermill-forwarder"), anything
		}, nil},
		{"wal.replication_url, password as written", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := postgresWithPassword(t, pw)
			raw := strings.Replace(u.String(), u.User.String(), u.User.Username()+":"+pw, 1)
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+u.String(), "BRIDGE_DATABASE_TABLE="+table,
				"BRIDGE_WAL_REPLICATION_URL="+raw), refused
		}, nil},
		{"wal.replication_url, password percent-encoded, source postgres-wal", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := postgresWithPassword(t, pw)
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+u.String(), "BRIDGE_DATABASE_TABLE="+table,
				"BRIDGE_WAL_REPLICATION_URL="+u.String(), "BRIDGE_SOURCE=postgres-wal"), anything
		}, nil},
		{"postgres, unreachable", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := postgresWithPassword(t, pw)
			u.Host = "127.0.0.1:" + strconv.Itoa(freePort(t))
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+u.String(), "BRIDGE_DATABASE_TABLE="+table), anything
		}, nil},
		{"mysql, password as written in the URL", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := mysqlWithPassword(t, pw)
			raw := strings.Replace(u.String(), u.User.String(), u.User.Username()+":"+pw, 1)
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+raw, "BRIDGE_DATABASE_TABLE="+table), refused
		}, nil},
		{"mysql, password percent-encoded in the URL", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := mysqlWithPassword(t, pw)
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+u.String(), "BRIDGE_DATABASE_TABLE="+table), works
		}, nil},
		{"mysql, password in the query", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := mysqlWithPassword(t, pw)
			q := u.Query()
			q.Set("password", pw)
			u.User, u.RawQuery = url.User(u.User.Username()), q.Encode()
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+u.String(), "BRIDGE_DATABASE_TABLE="+table), refused
		}, nil},
		// The go-sql-driver DSN address form, which the URL may take
		// (mysql://user:password@tcp(host:port)/database).
		{"mysql, DSN address form, password as written", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := mysqlWithPassword(t, pw)
			raw := "mysql://" + u.User.Username() + ":" + pw + "@tcp(" + u.Host + ")" + u.Path
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+raw, "BRIDGE_DATABASE_TABLE="+table), anything
		}, nil},
		{"mysql, DSN address form, password percent-encoded", func(t *testing.T, pw string) ([]string, outcome) {
			u, table := mysqlWithPassword(t, pw)
			raw := "mysql://" + u.User.String() + "@tcp(" + u.Host + ")" + u.Path
			return append(sqliteFreeNATS(t), "BRIDGE_DATABASE_URL="+raw, "BRIDGE_DATABASE_TABLE="+table), anything
		}, nil},
		{"nats, user and password as written in the URL", func(t *testing.T, pw string) ([]string, outcome) {
			srv := natsWithUser(t, pw)
			return append(sqliteOutbox(t), fmt.Sprintf("BRIDGE_NATS_URL=nats://app:%s@%s", pw, srv.Addr())), refused
		}, nil},
		{"nats, user and password percent-encoded in the URL", func(t *testing.T, pw string) ([]string, outcome) {
			srv := natsWithUser(t, pw)
			return append(sqliteOutbox(t), "BRIDGE_NATS_URL=nats://app:"+escape(pw)+"@"+srv.Addr().String()), works
		}, nil},
		{"nats, token as written in the URL", func(t *testing.T, pw string) ([]string, outcome) {
			srv := natsWithToken(t, pw)
			return append(sqliteOutbox(t), fmt.Sprintf("BRIDGE_NATS_URL=nats://%s@%s", pw, srv.Addr())), refused
		}, nil},
		{"nats, token percent-encoded in the URL", func(t *testing.T, pw string) ([]string, outcome) {
			srv := natsWithToken(t, pw)
			return append(sqliteOutbox(t), "BRIDGE_NATS_URL=nats://"+escape(pw)+"@"+srv.Addr().String()), works
		}, nil},
		{"nats, tokens of a cluster list as written", func(t *testing.T, pw string) ([]string, outcome) {
			srv := natsWithToken(t, pw)
			return append(sqliteOutbox(t), fmt.Sprintf("BRIDGE_NATS_URL=nats://%s@%s, nats://%s@127.0.0.1:%d", pw, srv.Addr(), pw, freePort(t))), refused
		}, nil},
		{"nats, unreachable, password percent-encoded in the URL", func(t *testing.T, pw string) ([]string, outcome) {
			return append(sqliteOutbox(t), fmt.Sprintf("BRIDGE_NATS_URL=nats://app:%s@127.0.0.1:%d", escape(pw), freePort(t))), anything
		}, nil},
		{"nats.password", func(t *testing.T, pw string) ([]string, outcome) {
			srv := natsWithUser(t, pw)
			return append(sqliteOutbox(t), "BRIDGE_NATS_URL=nats://"+srv.Addr().String(), "BRIDGE_NATS_USER=app", "BRIDGE_NATS_PASSWORD="+pw), works
		}, nil},
		{"nats.password, wrong", func(t *testing.T, pw string) ([]string, outcome) {
			srv := natsWithUser(t, "other")
			return append(sqliteOutbox(t), "BRIDGE_NATS_URL=nats://"+srv.Addr().String(), "BRIDGE_NATS_USER=app", "BRIDGE_NATS_PASSWORD="+pw), anything
		}, nil},
		{"nats.token", func(t *testing.T, pw string) ([]string, outcome) {
			srv := natsWithToken(t, pw)
			return append(sqliteOutbox(t), "BRIDGE_NATS_URL=nats://"+srv.Addr().String(), "BRIDGE_NATS_TOKEN="+pw), works
		}, nil},
		{"ui.token", func(t *testing.T, pw string) ([]string, outcome) {
			srv := bridgetest.StartNATSWithOptions(t, nil)
			return append(sqliteOutbox(t), "BRIDGE_NATS_URL=nats://"+srv.Addr().String(), "BRIDGE_UI_ENABLED=true", "BRIDGE_UI_TOKEN="+pw), anything
		}, nil},
		{"nats.nkey_seed_file holding no seed", func(t *testing.T, pw string) ([]string, outcome) {
			srv := bridgetest.StartNATSWithOptions(t, nil)
			return append(sqliteOutbox(t), "BRIDGE_NATS_URL=nats://"+srv.Addr().String(), "BRIDGE_NATS_NKEY_SEED_FILE="+secretFile(t, "seed.nk", pw+"\n")), anything
		}, nil},
		{"nats.creds_file holding no credentials", func(t *testing.T, pw string) ([]string, outcome) {
			srv := bridgetest.StartNATSWithOptions(t, nil)
			creds := "-----BEGIN NATS USER JWT-----\n" + pw + "\n------END NATS USER JWT------\n\n" +
				"-----BEGIN USER NKEY SEED-----\n" + pw + "\n------END USER NKEY SEED------\n"
			return append(sqliteOutbox(t), "BRIDGE_NATS_URL=nats://"+srv.Addr().String(), "BRIDGE_NATS_CREDS_FILE="+secretFile(t, "user.creds", creds)), anything
		}, nil},
	}
}

// escape percent-encodes every byte of s but letters and digits: what a
// user does to put any password in a URL (url.UserPassword leaves ',' as
// it is, and nats.go splits its URL list at commas).
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func secretFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// sqliteFreeNATS is a NATS server without authentication, with the stream
// EVENTS, for the cases whose secret is the database's.
func sqliteFreeNATS(t *testing.T) []string {
	t.Helper()
	srv := bridgetest.StartNATSWithOptions(t, nil)
	createEvents(t, srv.ClientURL())
	return []string{"BRIDGE_NATS_URL=" + srv.ClientURL()}
}

// sqliteOutbox is a migrated SQLite outbox, for the cases whose secret is
// NATS's.
func sqliteOutbox(t *testing.T) []string {
	t.Helper()
	env := []string{"BRIDGE_DATABASE_URL=" + bridgetest.SQLiteURL(t)}
	r := runBridge(t, t.TempDir(), env, "migrate")
	require.Equal(t, 0, r.code, "bridge migrate\n%s", r)
	return env
}

func createEvents(t *testing.T, natsURL string, opts ...nats.Option) {
	t.Helper()
	js := natsClient(t, natsURL, opts...)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
}

func natsWithUser(t *testing.T, password string) *server.Server {
	t.Helper()
	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) { o.Username, o.Password = "app", password })
	createEvents(t, srv.ClientURL(), nats.UserInfo("app", password))
	return srv
}

func natsWithToken(t *testing.T, token string) *server.Server {
	t.Helper()
	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) { o.Authorization = token })
	createEvents(t, srv.ClientURL(), nats.Token(token))
	return srv
}

// postgresWithPassword creates a login role with password, allowed to
// create the outbox in a new schema, and returns the URL that logs in as
// it, with the password percent-encoded, and the table.
func postgresWithPassword(t *testing.T, password string) (*url.URL, string) {
	t.Helper()
	adminURL, table := bridgetest.PostgresTable(t)
	raw := pgRole(t, adminURL, table, strings.ReplaceAll(password, "'", "''"))
	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), password)
	return u, table
}

// mysqlWithPassword creates a user with password, allowed everything on a
// new database, and returns the URL that logs in as it, with the password
// percent-encoded, and the table.
func mysqlWithPassword(t *testing.T, password string) (*url.URL, string) {
	t.Helper()
	adminURL, table := bridgetest.MySQLTable(t)
	admin, err := url.Parse(adminURL)
	require.NoError(t, err)
	cfgPw, _ := admin.User.Password()
	dsn := fmt.Sprintf("%s:%s@tcp(%s)/", admin.User.Username(), cfgPw, admin.Host)
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	user := "sec_" + randomToken(t, 6)
	literal := "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(password) + "'"
	_, err = db.Exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY " + literal)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec("DROP USER '" + user + "'@'%'") })
	database, _, _ := strings.Cut(table, ".")
	_, err = db.Exec("GRANT ALL ON " + database + ".* TO '" + user + "'@'%'")
	require.NoError(t, err)
	u := *admin
	u.User = url.UserPassword(user, password)
	u.Path = "/" + database
	return &u, table
}

// commandOutput is what one command printed.
type commandOutput struct{ what, text string }

// runEveryCommand runs each command that reads the configuration in env
// and returns what each printed, checking the exit codes that want says.
func runEveryCommand(t *testing.T, dir string, env []string, want outcome) []commandOutput {
	t.Helper()
	var out []commandOutput
	debug := []string{"--log-level", "debug"}
	for _, args := range [][]string{
		{"config"},
		{"run", "--check-config"},
		{"migrate"},
		{"enqueue", "--subject", "events.secret", "--data", "x"},
		{"status"},
		{"status", "--json"},
		{"requeue", "--older-than", "1h"},
		{"retry", "--all-failed"},
		{"purge", "--done-older-than", "1h"},
	} {
		r := runBridge(t, dir, env, append(args, debug...)...)
		what := strings.Join(args, " ")
		out = append(out, commandOutput{what, r.stdout + r.stderr})
		switch want {
		case refused:
			require.Equal(t, 2, r.code, "bridge %s\n%s", what, r)
		case works:
			require.Equal(t, 0, r.code, "bridge %s\n%s", what, r)
		}
	}
	for _, daemon := range []struct {
		args         []string
		ready, retry string // what it says once it runs, or when it waits and tries again
	}{
		{[]string{"tail", "--subject", "events.>"}, "tailing events.>", "\x00"},
		{[]string{"run"}, `"msg":"relay running"`, `"msg":"relay cannot start yet; trying again"`},
	} {
		p := start(t, dir, env, append(daemon.args, debug...)...)
		what := strings.Join(daemon.args, " ")
		said := func(s string) bool { return strings.Contains(p.stderr.String(), s) }
		poll(t, 60*time.Second, func() bool { return p.exited() || said(daemon.ready) || said(daemon.retry) },
			"bridge %s neither exited nor said %q or %q\nstderr:\n%s", what, daemon.ready, daemon.retry, p.stderr)
		running := !p.exited() && said(daemon.ready)
		if !p.exited() {
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		}
		code := p.wait(t, 60*time.Second)
		out = append(out, commandOutput{what, p.stdout.String() + p.stderr.String()})
		switch want {
		case refused:
			require.Equal(t, 2, code, "bridge %s\nstderr:\n%s", what, p.stderr)
		case works:
			require.True(t, running, "bridge %s exited with %d\nstderr:\n%s", what, code, p.stderr)
		}
	}
	return out
}
