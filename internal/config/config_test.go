package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// load registers the flags, parses args, writes yaml (when not empty) to a temp file passed
// as --config, and calls Load.
func load(t *testing.T, yaml string, environ []string, args ...string) (*Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("bridge", pflag.ContinueOnError)
	RegisterFlags(fs)
	if yaml != "" {
		path := filepath.Join(t.TempDir(), "bridge.yaml")
		require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
		args = append([]string{"--config", path}, args...)
	}
	require.NoError(t, fs.Parse(args))
	return Load(fs, environ)
}

// requireConfigError checks that err is an *Error with the key and returns it.
func requireConfigError(t *testing.T, err error, key string) *Error {
	t.Helper()
	require.Error(t, err)
	require.True(t, IsError(err), "not a config error: %v", err)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, key, e.Key, "error: %v", err)
	return e
}

func TestDefaults(t *testing.T) {
	t.Parallel()

	cfg, err := load(t, "", nil)
	require.NoError(t, err)
	require.Equal(t, Default(), *cfg)

	require.Equal(t, "./bridge-data", cfg.DataDir)
	require.Equal(t, "outbox", cfg.Database.Table)
	require.Equal(t, 3*time.Minute, cfg.Database.ConnMaxLifetime)
	require.Equal(t, time.Minute, cfg.Database.ConnMaxIdleTime)
	require.Equal(t, 10*time.Second, cfg.Database.ConnectTimeout)
	require.True(t, cfg.EmbeddedDatabase())
	for url, embedded := range map[string]bool{
		"sqlite:bridge-data/outbox.db":   true, // as bridge config prints it
		"sqlite:./bridge-data/outbox.db": true,
		"sqlite:bridge-data/other.db":    false,
		"sqlite:outbox.db":               false,
		"postgres://h/db":                false,
	} {
		c := *cfg
		c.Database.URL = url
		require.Equal(t, embedded, c.EmbeddedDatabase(), url)
	}
	require.Equal(t, "sqlite:"+filepath.Join("bridge-data", "outbox.db"), cfg.DatabaseURL())
	require.True(t, cfg.EmbeddedNATS())
	require.Equal(t, "127.0.0.1:4222", cfg.NATS.Listen)
	require.Equal(t, filepath.Join("bridge-data", "jetstream"), cfg.JetStreamDir())
	require.Empty(t, cfg.Streams)
	require.Equal(t, []Stream{{
		Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: 2 * time.Minute, Replicas: 0, Storage: "file",
	}}, cfg.EffectiveStreams(), "replicas 0: auto, 1 on the embedded single server")

	r := cfg.Relay
	require.Equal(t, 500, r.BatchSize)
	require.Equal(t, 2000, r.MaxInFlight)
	require.Equal(t, 32*MiB, r.MaxInFlightBytes)
	require.Equal(t, 250*time.Millisecond, r.PollInterval)
	require.Equal(t, 30*time.Second, r.InflightTimeout)
	require.Equal(t, 20*time.Second, r.AckDeadline)
	require.Equal(t, 5*time.Second, r.PublishTimeout)
	require.Equal(t, 20, r.MaxAttempts)
	require.Equal(t, time.Second, r.BackoffInitial)
	require.Equal(t, 5*time.Minute, r.BackoffMax)
	require.Equal(t, 24*time.Hour, r.Retention)
	require.False(t, r.DeleteOnRelay)
	host, err := os.Hostname()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(r.Owner, host+"-"), r.Owner)

	require.Equal(t, Dedup{Guard: "refuse", ReconcileMaxMessages: 100000, ReconcileTimeout: 30 * time.Second}, cfg.Dedup)
	require.Equal(t, "table", cfg.Source)
	require.Equal(t, Watermill{ForwarderTopic: "forwarder_topic"}, cfg.Watermill)
	require.Equal(t, ":8080", cfg.HTTP.Listen)
	require.Equal(t, Log{Level: "info", Format: "auto"}, cfg.Log)
	require.Equal(t, 25*time.Second, cfg.ShutdownTimeout)

	d := Default()
	require.NoError(t, d.Validate())
}

func TestLoadPrecedence(t *testing.T) {
	t.Parallel()

	const yaml = `
relay:
  batch_size: 10
  poll_interval: 1s
database:
  table: from_file
log:
  level: debug
`
	environ := []string{"BRIDGE_RELAY_BATCH_SIZE=20", "BRIDGE_DATABASE_TABLE=from_env", "PATH=/bin"}

	t.Run("FileOverDefaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(t, yaml, nil)
		require.NoError(t, err)
		require.Equal(t, 10, cfg.Relay.BatchSize)
		require.Equal(t, time.Second, cfg.Relay.PollInterval)
		require.Equal(t, "from_file", cfg.Database.Table)
		require.Equal(t, "debug", cfg.Log.Level)
		require.Equal(t, 2000, cfg.Relay.MaxInFlight, "a key the file leaves out keeps its default")
	})

	t.Run("EnvOverFile", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(t, yaml, environ)
		require.NoError(t, err)
		require.Equal(t, 20, cfg.Relay.BatchSize)
		require.Equal(t, "from_env", cfg.Database.Table)
		require.Equal(t, time.Second, cfg.Relay.PollInterval, "file value without a variable stays")
	})

	t.Run("FlagOverEnv", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(t, yaml, environ, "--batch-size", "30", "--table", "from_flag")
		require.NoError(t, err)
		require.Equal(t, 30, cfg.Relay.BatchSize)
		require.Equal(t, "from_flag", cfg.Database.Table)
		require.Equal(t, "debug", cfg.Log.Level, "an unset flag's default does not override the file")
		require.Equal(t, time.Second, cfg.Relay.PollInterval)
	})
}

func TestEnvNames(t *testing.T) {
	t.Parallel()

	require.Equal(t, "BRIDGE_RELAY_INFLIGHT_TIMEOUT", EnvName("relay.inflight_timeout"))
	require.Equal(t, "BRIDGE_NATS_TLS_CA_FILE", EnvName("nats.tls.ca_file"))
	require.Equal(t, "BRIDGE_DATA_DIR", EnvName("data_dir"))

	cfg, err := load(t, "", []string{
		"BRIDGE_RELAY_INFLIGHT_TIMEOUT=45s",
		"BRIDGE_NATS_TLS_CA_FILE=/etc/nats/ca.pem",
		"BRIDGE_DATA_DIR=/var/lib/bridge",
		"BRIDGE_RELAY_DELETE_ON_RELAY=true",
		"BRIDGE_SERVICE_HOST=10.0.0.1",
		"BRIDGE_TEST_POSTGRES_URL=postgres://x",
		"BRIDGE_STREAMS=ignored",
	})
	require.NoError(t, err)
	require.Equal(t, 45*time.Second, cfg.Relay.InflightTimeout)
	require.Equal(t, "/etc/nats/ca.pem", cfg.NATS.TLS.CAFile)
	require.Equal(t, "/var/lib/bridge", cfg.DataDir)
	require.True(t, cfg.Relay.DeleteOnRelay)
	require.Empty(t, cfg.Streams)

	require.Equal(t,
		[]string{"BRIDGE_SERVICE_HOST", "BRIDGE_STREAMS", "BRIDGE_TEST_POSTGRES_URL"},
		UnknownEnv([]string{
			"BRIDGE_TEST_POSTGRES_URL=postgres://x", "BRIDGE_SERVICE_HOST=10.0.0.1", "HOME=/root",
			"BRIDGE_RELAY_BATCH_SIZE=1", "BRIDGE_STREAMS=x", "BRIDGE_SERVICE_HOST=dup",
		}))

	for name, hint := range map[string]string{
		"BRIDGE_STREAMS":         "streams has no environment variable; set it in the YAML file (--config) or with --ensure-stream NAME:SUBJ[,SUBJ]",
		"BRIDGE_STREAMS_0_NAME":  "streams has no environment variable",
		"BRIDGE_STREAM":          "",
		"BRIDGE_STREAMSX":        "",
		"BRIDGE_RELAY_BATCHSIZE": "",
	} {
		if hint == "" {
			require.Empty(t, EnvHint(name), name)
			continue
		}
		require.Contains(t, EnvHint(name), hint, name)
	}

	_, err = load(t, "", []string{"BRIDGE_RELAY_BATCH_SIZE=lots"})
	e := requireConfigError(t, err, "relay.batch_size")
	require.Equal(t, "lots", e.Value)
}

func TestUnknownYAMLKey(t *testing.T) {
	t.Parallel()

	_, err := load(t, "relay:\n  bach_size: 5\n", nil)
	requireConfigError(t, err, "relay.bach_size")
	require.ErrorContains(t, err, "invalid config: relay.bach_size: unknown key; known keys under relay: batch_size, max_in_flight,")

	_, err = load(t, "streams:\n  - name: A\n    subjects: [a]\n    replica: 3\n", nil)
	requireConfigError(t, err, "streams[0].replica")

	_, err = load(t, "colour: blue\n", nil)
	requireConfigError(t, err, "colour")
}

// TestUnknownYAMLKeysAllAtOnce: a file with several unknown keys, at
// several depths, is refused with every one of them named, one per line.
func TestUnknownYAMLKeysAllAtOnce(t *testing.T) {
	t.Parallel()

	_, err := load(t, "colour: blue\nrelay:\n  bach_size: 5\n  max_inflight: 3\nstreams:\n  - name: A\n    subjects: [a]\n    replica: 3\n", nil)
	requireConfigError(t, err, "colour")
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 4, "one line per unknown key:\n%v", err)
	for i, key := range []string{"colour", "relay.bach_size", "relay.max_inflight", "streams[0].replica"} {
		require.True(t, strings.HasPrefix(lines[i], "invalid config: "+key+": unknown key; "), "line %d: %s", i, lines[i])
	}
}

func TestWrongType(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct{ yaml, key, value string }{
		{"relay:\n  batch_size: many\n", "relay.batch_size", "many"},
		{"relay:\n  poll_interval: 250\n", "relay.poll_interval", "250"},
		{"relay:\n  delete_on_relay: maybe\n", "relay.delete_on_relay", "maybe"},
		{"relay:\n  max_in_flight_bytes: lots\n", "relay.max_in_flight_bytes", "lots"},
		{"relay:\n  max_in_flight_bytes: -1MiB\n", "relay.max_in_flight_bytes", "-1MiB"},
		{"relay: 5\n", "relay", "5"},
		{"shutdown_timeout: soon\n", "shutdown_timeout", "soon"},
	} {
		_, err := load(t, tc.yaml, nil)
		e := requireConfigError(t, err, tc.key)
		require.Equal(t, tc.value, e.Value)
	}
}

// TestByteSizes: relay.max_in_flight_bytes takes a number of bytes or a
// size with a decimal or binary unit, from the file, the environment or a
// default, and is written back in the shortest exact unit.
func TestByteSizes(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]ByteSize{
		"1000": 1000, "64MiB": 64 << 20, "64 MiB": 64 << 20, "64MB": 64_000_000, "1.5MiB": 3 << 19, "2GiB": 2 << 30, "512kB": 512_000,
	} {
		cfg, err := load(t, "", []string{"BRIDGE_RELAY_MAX_IN_FLIGHT_BYTES=" + in})
		require.NoError(t, err, in)
		require.Equal(t, want, cfg.Relay.MaxInFlightBytes, in)
		back, err := ParseByteSize(want.String())
		require.NoError(t, err)
		require.Equal(t, want, back, "%s written as %s", in, want)
	}
	cfg, err := load(t, "relay:\n  max_in_flight_bytes: 4096\n", nil)
	require.NoError(t, err)
	require.Equal(t, 4*KiB, cfg.Relay.MaxInFlightBytes)
	require.Equal(t, "4KiB", cfg.Relay.MaxInFlightBytes.String())
	require.Equal(t, "1001", ByteSize(1001).String())
	require.Equal(t, "64MB", ByteSize(64_000_000).String())
	require.Equal(t, "32MiB", MaxInFlightBytesDefault.String())
}

func TestNegativeDurationRefused(t *testing.T) {
	t.Parallel()

	_, err := load(t, "relay:\n  backoff_initial: -1s\n", nil)
	e := requireConfigError(t, err, "relay.backoff_initial")
	require.Equal(t, `invalid config: relay.backoff_initial: "-1s": must be a positive duration such as 30s`, e.Error())

	_, err = load(t, "", []string{"BRIDGE_SHUTDOWN_TIMEOUT=0s"})
	requireConfigError(t, err, "shutdown_timeout")
}

func TestTimeoutOrder(t *testing.T) {
	t.Parallel()

	_, err := load(t, "relay:\n  publish_timeout: 30s\n  inflight_timeout: 30s\n", nil)
	e := requireConfigError(t, err, "relay.publish_timeout")
	require.Contains(t, e.Allowed, "must be at least 500ms shorter than relay.ack_deadline (20s)")
	// Shorter, but not by enough to learn why a publish failed before the
	// relay gives up on it: every row's wait would end at the deadline.
	_, err = load(t, "relay:\n  publish_timeout: 19800ms\n", nil)
	requireConfigError(t, err, "relay.publish_timeout")
	_, err = load(t, "relay:\n  publish_timeout: 19500ms\n", nil)
	require.NoError(t, err)

	_, err = load(t, "relay:\n  ack_deadline: 40s\n", nil)
	e = requireConfigError(t, err, "relay.ack_deadline")
	require.Equal(t, "must be shorter than relay.inflight_timeout (30s)", e.Allowed)

	_, err = load(t, "relay:\n  backoff_initial: 10m\n", nil)
	requireConfigError(t, err, "relay.backoff_initial")
}

func TestTableName(t *testing.T) {
	t.Parallel()

	for _, bad := range []string{"out-box", "a.b.c", "1x", "x;drop", "", strings.Repeat("a", 64)} {
		_, err := load(t, "", []string{"BRIDGE_DATABASE_TABLE=" + bad})
		e := requireConfigError(t, err, "database.table")
		require.Equal(t, bad, e.Value)
		require.Contains(t, e.Allowed, "SQL identifier")
	}
	cfg, err := load(t, "", nil, "--table", "app.outbox", "--database-url", "postgres://h/db")
	require.NoError(t, err)
	require.Equal(t, "app.outbox", cfg.Database.Table)
	_, err = load(t, "", nil, "--table", "app.outbox") // the embedded SQLite database
	e := requireConfigError(t, err, "database.table")
	require.Contains(t, e.Allowed, "no schemas")
}

// TestTables: several tables or patterns from the flag (repeated), the
// environment (comma-separated) and the file (a list) are database.tables;
// one plain name given any of these ways is database.table, as before.
// Both keys set, a bad pattern, a repeat and a schema with SQLite are
// refused, naming the item.
func TestTables(t *testing.T) {
	t.Parallel()
	pg := []string{"--database-url", "postgres://h/db"}
	for name, c := range map[string]struct {
		yaml    string
		environ []string
		args    []string
		table   string
		tables  []string
	}{
		"flag, one name":       {args: []string{"--table", "app.outbox"}, table: "app.outbox"},
		"flag, repeated":       {args: []string{"--table", "a.outbox", "--table", "b.outbox"}, table: TableDefault, tables: []string{"a.outbox", "b.outbox"}},
		"flag, a pattern":      {args: []string{"--table", "tenant_*.outbox"}, table: TableDefault, tables: []string{"tenant_*.outbox"}},
		"environment":          {environ: []string{"BRIDGE_DATABASE_TABLES=tenant_*.outbox, app.*_outbox"}, table: TableDefault, tables: []string{"tenant_*.outbox", "app.*_outbox"}},
		"environment, one":     {environ: []string{"BRIDGE_DATABASE_TABLES=app.outbox"}, table: "app.outbox"},
		"file":                 {yaml: "database:\n  tables: ['*.outbox', app.events]\n", table: TableDefault, tables: []string{"*.outbox", "app.events"}},
		"flag over file table": {yaml: "database:\n  table: app.outbox\n", args: []string{"--table", "b.*"}, table: TableDefault, tables: []string{"b.*"}},
	} {
		cfg, err := load(t, c.yaml, c.environ, append(c.args, pg...)...)
		require.NoError(t, err, name)
		require.Equal(t, c.table, cfg.Database.Table, name)
		require.Equal(t, c.tables, cfg.Database.Tables, name)
	}

	_, err := load(t, "database:\n  table: app.outbox\n  tables: [b.outbox, c.outbox]\n", nil, pg...)
	e := requireConfigError(t, err, "database.tables")
	require.Contains(t, e.Allowed, "not be set with database.table (app.outbox)")
	for bad, want := range map[string]string{
		"tenant-*.outbox":  "not an SQL identifier",
		"a.b.*":            "more than one dot",
		"app.*_migrations": "_migrations",
	} {
		_, err := load(t, "", []string{"BRIDGE_DATABASE_TABLES=x.outbox," + bad}, pg...)
		e := requireConfigError(t, err, "database.tables[1]")
		require.Equal(t, bad, e.Value)
		require.Contains(t, e.Allowed, want, bad)
	}
	_, err = load(t, "", nil, append([]string{"--table", "a.outbox", "--table", "a.outbox"}, pg...)...)
	require.Contains(t, requireConfigError(t, err, "database.tables[1]").Allowed, "differ")
	_, err = load(t, "", nil, "--table", "*_outbox", "--table", "app.*") // the embedded SQLite database
	require.Contains(t, requireConfigError(t, err, "database.tables[1]").Allowed, "no schemas")
	_, err = load(t, "database:\n  tables: {a: b}\n", nil, pg...)
	requireConfigError(t, err, "database.tables")
	// Empty items are refused, not read as the default table (found by a
	// saboteur: --table '' and BRIDGE_DATABASE_TABLES=, meant outbox).
	_, err = load(t, "", nil, append([]string{"--table", ""}, pg...)...)
	require.Contains(t, requireConfigError(t, err, "database.table").Allowed, "must not be empty")
	for _, v := range []string{",", "", "a.outbox,"} {
		_, err = load(t, "", []string{"BRIDGE_DATABASE_TABLES=" + v}, pg...)
		require.Error(t, err, v)
	}
}

func TestValidateRefuses(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		edit func(*Config)
		key  string
	}{
		{"ConnMaxLifetime", func(c *Config) { c.Database.ConnMaxLifetime = 0 }, "database.conn_max_lifetime"},
		{"ConnMaxIdleTime", func(c *Config) { c.Database.ConnMaxIdleTime = -time.Second }, "database.conn_max_idle_time"},
		{"ConnectTimeout", func(c *Config) { c.Database.ConnectTimeout = 0 }, "database.connect_timeout"},
		{"MySQLDSNPort", func(c *Config) { c.Database.URL = "mysql://u:secret@h:port/db" }, "database.url"},
		{"BatchSizeZero", func(c *Config) { c.Relay.BatchSize = 0 }, "relay.batch_size"},
		{"UIWithoutToken", func(c *Config) { c.UI.Enabled = true }, "ui.token"},
		{"UIShortToken", func(c *Config) { c.UI.Enabled, c.UI.Token = true, "short" }, "ui.token"},
		{"UITokenWithSpace", func(c *Config) { c.UI.Token = "a token with spaces in it" }, "ui.token"},
		{"BatchSizeHuge", func(c *Config) { c.Relay.BatchSize = 100001 }, "relay.batch_size"},
		{"MaxInFlight", func(c *Config) { c.Relay.MaxInFlight = 0 }, "relay.max_in_flight"},
		{"MaxInFlightBytes", func(c *Config) { c.Relay.MaxInFlightBytes = 0 }, "relay.max_in_flight_bytes"},
		{"MaxAttempts", func(c *Config) { c.Relay.MaxAttempts = 0 }, "relay.max_attempts"},
		{"OwnerBlank", func(c *Config) { c.Relay.Owner = " " }, "relay.owner"},
		{"OwnerNewline", func(c *Config) { c.Relay.Owner = "a\nb" }, "relay.owner"},
		{"OwnerTab", func(c *Config) { c.Relay.Owner = "a\tb" }, "relay.owner"},
		{"OwnerLong", func(c *Config) { c.Relay.Owner = strings.Repeat("o", 201) }, "relay.owner"},
		{"DatabaseScheme", func(c *Config) { c.Database.URL = "oracle://u:p@h/db" }, "database.url"},
		{"NATSScheme", func(c *Config) { c.NATS.URL = "nats://a:4222,http://b:4222" }, "nats.url"},
		{"NATSListen", func(c *Config) { c.NATS.Listen = ":4222" }, "nats.listen"},
		{"HTTPListen", func(c *Config) { c.HTTP.Listen = "8080" }, "http.listen"},
		{"Guard", func(c *Config) { c.Dedup.Guard = "maybe" }, "dedup.guard"},
		{"Source", func(c *Config) { c.Source = "kafka" }, "source"},
		{"LogLevel", func(c *Config) { c.Log.Level = "trace" }, "log.level"},
		{"LogFormat", func(c *Config) { c.Log.Format = "xml" }, "log.format"},
		{"StreamName", func(c *Config) { c.Streams = []Stream{stream("A.B", "a")} }, "streams[0].name"},
		{"StreamNoSubject", func(c *Config) { c.Streams = []Stream{stream("A")} }, "streams[0].subjects"},
		{"StreamSubject", func(c *Config) { c.Streams = []Stream{stream("A", "a.>.b")} }, "streams[0].subjects[0]"},
		{"StreamReplicas", func(c *Config) { s := stream("A", "a"); s.Replicas = 6; c.Streams = []Stream{s} }, "streams[0].replicas"},
		{"StreamReplicasEmbedded", func(c *Config) { s := stream("A", "a"); s.Replicas = 3; c.Streams = []Stream{s} }, "streams[0].replicas"},
		{"StreamSubjectsOverlap", func(c *Config) { c.Streams = []Stream{stream("A", "events.>", "events.x")} }, "streams[0].subjects[1]"},
		{"StreamsOverlap", func(c *Config) { c.Streams = []Stream{stream("A", "x.>"), stream("B", "x.y")} }, "streams[1].subjects[0]"},
		{"StreamCoversJSAPI", func(c *Config) { c.Streams = []Stream{stream("A", ">")} }, "streams[0].subjects[0]"},
		{"StreamDuplicates", func(c *Config) { s := stream("A", "a"); s.Duplicates = time.Millisecond; c.Streams = []Stream{s} }, "streams[0].duplicates"},
		{"StreamStorage", func(c *Config) { s := stream("A", "a"); s.Storage = "disk"; c.Streams = []Stream{s} }, "streams[0].storage"},
		{"StreamDuplicateName", func(c *Config) { c.Streams = []Stream{stream("A", "a"), stream("A", "b")} }, "streams[1].name"},
		{"StreamDuplicatesOverMaxAge", func(c *Config) { s := stream("A", "a"); s.MaxAge = time.Second; c.Streams = []Stream{s} }, "streams[0].duplicates"},
		{"StreamMaxAgeTiny", func(c *Config) { s := stream("A", "a"); s.MaxAge = time.Millisecond; c.Streams = []Stream{s} }, "streams[0].max_age"},
		{"TLSKeyWithoutCert", func(c *Config) { c.NATS.TLS.KeyFile = "/k.pem" }, "nats.tls.key_file"},
		{"TwoAuthMethods", func(c *Config) { c.NATS.CredsFile = "/c"; c.NATS.Token = "t" }, "nats.token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			tc.edit(&c)
			requireConfigError(t, c.Validate(), tc.key)
		})
	}

	c := Default()
	c.Database.URL = "postgres://u:secret@h/db?sslmode=x"
	c.NATS.URL = "nats://a:4222, tls://b:4222"
	c.HTTP.Listen = "127.0.0.1:9090"
	c.Streams = []Stream{stream("ORDERS", "orders.*.created", "payments.>"), stream("SHIP", "shipments.>")}
	c.Streams[1].Replicas = 3 // a real cluster
	require.NoError(t, c.Validate())

	// The value of a bad database URL is redacted in the error.
	c.Database.URL = "postgress://u:secret@h/db"
	require.NotContains(t, c.Validate().Error(), "secret")

	// MySQL URLs as Go programs write them: go-sql-driver's DSN after the
	// scheme (golang-migrate's form). A URL net/url refuses names that form.
	for _, dsn := range []string{"mysql://root@tcp(127.0.0.1:3306)/db", "mysql://u:p@ss@tcp(db:3306)/app?tls=true", "mysql://u@unix(/run/mysqld/mysqld.sock)/db"} {
		c.Database.URL = dsn
		require.NoError(t, c.Validate(), dsn)
	}
	c.Database.URL = "mysql://u:secret@h:port/db"
	err := c.Validate()
	require.ErrorContains(t, err, "mysql://user:password@tcp(host:port)/database")
	require.NotContains(t, err.Error(), "secret")
}

func stream(name string, subjects ...string) Stream {
	return Stream{Name: name, Subjects: subjects, Duplicates: 2 * time.Minute, Replicas: 0, Storage: "file"}
}

func TestEnsureStream(t *testing.T) {
	t.Parallel()

	s, err := ParseStreamFlag("EVENTS:a.>,b.>")
	require.NoError(t, err)
	require.Equal(t, Stream{Name: "EVENTS", Subjects: []string{"a.>", "b.>"}, Duplicates: 2 * time.Minute, Replicas: 0, Storage: "file"}, s)
	r3, err := ParseStreamFlag("EVENTS:a.>,b.>:r3")
	require.NoError(t, err)
	require.Equal(t, Stream{Name: "EVENTS", Subjects: []string{"a.>", "b.>"}, Duplicates: 2 * time.Minute, Replicas: 3, Storage: "file"}, r3)

	for _, bad := range []string{"EVENTS", "EVENTS:", ":a.>", "A:x.>,B:y.>", "A:x.>:3", "A:x.>:r0", "A:x.>:r6", "A:x.>:r3:r3", "A::r3"} {
		_, err := ParseStreamFlag(bad)
		requireConfigError(t, err, "--ensure-stream")
	}

	const yaml = "streams:\n  - name: FROM_FILE\n    subjects: [x]\n"
	cfg, err := load(t, yaml, nil, "--ensure-stream", "EVENTS:a.>,b.>", "--ensure-stream", "AUDIT:audit.>")
	require.NoError(t, err)
	require.Equal(t, []Stream{s, stream("AUDIT", "audit.>")}, cfg.Streams, "the flag replaces the file's streams")
	require.Equal(t, cfg.Streams, cfg.EffectiveStreams())

	cfg, err = load(t, yaml, nil)
	require.NoError(t, err)
	require.Equal(t, []Stream{stream("FROM_FILE", "x")}, cfg.Streams, "stream defaults fill the keys a file leaves out")

	_, err = load(t, "", nil, "--ensure-stream", "BAD.NAME:x")
	requireConfigError(t, err, "--ensure-stream BAD.NAME:x (the name)") // the flag, not streams[0].name
}

func TestRedacted(t *testing.T) {
	t.Parallel()

	c := Default()
	c.Database.URL = "postgres://u:secret@h/db"
	c.NATS.URL = "nats://nu:npass@a:4222,nats://tok@b:4222"
	c.NATS.User = "nu"
	c.NATS.Password = "npass"
	c.NATS.Token = "ntoken"
	c.NATS.CredsFile = "/etc/nats/user.creds"
	c.UI.Token = "uitoken-uitoken-uitoken"

	r := c.Redacted()
	require.Equal(t, "postgres://u:REDACTED@h/db", r.Database.URL)
	require.Equal(t, "nats://REDACTED@a:4222,nats://REDACTED@b:4222", r.NATS.URL, "a NATS userinfo is hidden whole: a token may hold a colon")
	require.Equal(t, "REDACTED", r.NATS.Password)
	require.Equal(t, "REDACTED", r.NATS.Token)
	require.Equal(t, "REDACTED", r.UI.Token)
	require.Equal(t, "/etc/nats/user.creds", r.NATS.CredsFile, "file paths are not secrets")
	require.Equal(t, "postgres://u:secret@h/db", c.Database.URL, "the original is unchanged")

	out, err := r.YAML()
	require.NoError(t, err)
	for _, secret := range []string{"secret", "npass", "ntoken", "tok@", "uitoken"} {
		require.NotContains(t, string(out), secret)
	}

	for in, want := range map[string]string{
		"postgres://h/db?sslmode=require&password=pw":  "postgres://h/db?sslmode=require&password=REDACTED",
		"postgres://u@h/db":                            "postgres://u@h/db",
		"host=h user=u password='a b' dbname=d":        "host=h user=u password=REDACTED dbname=d",
		"mysql://u:p@tcp(h:3306)/db?sslpassword=x&a=b": "mysql://u:REDACTED@tcp(h:3306)/db?sslpassword=REDACTED&a=b",
		"sqlite:/var/lib/bridge/outbox.db":             "sqlite:/var/lib/bridge/outbox.db",
	} {
		c := Config{Database: Database{URL: in}}
		require.Equal(t, want, c.Redacted().Database.URL, in)
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	t.Parallel()

	c := Default()
	c.DataDir = "/var/lib/bridge"
	c.Database = Database{URL: "postgres://u:p@db:5432/app?sslmode=disable", Table: "app.outbox", TablesRefresh: 45 * time.Second, ConnMaxLifetime: 10 * time.Minute, ConnMaxIdleTime: 30 * time.Second,
		ConnectTimeout: 5 * time.Second}
	c.NATS = NATS{
		URL: "nats://a:4222,nats://b:4222", Listen: "0.0.0.0:4222", User: "u", Password: "true",
		TLS: TLS{CAFile: "/ca.pem", CertFile: "/c.pem", KeyFile: "/k.pem"},
	}
	c.Streams = []Stream{
		{Name: "ORDERS", Subjects: []string{"orders.>", "refunds.*"}, Duplicates: 10 * time.Minute, Replicas: 3, Storage: "memory", MaxAge: 168 * time.Hour},
	}
	c.Relay.BatchSize = 100
	c.Relay.MaxInFlightBytes = 64_000_000
	c.Relay.PollInterval = 1500 * time.Millisecond
	c.Relay.BackoffMax = 90 * time.Second
	c.Relay.DeleteOnRelay = true
	c.Relay.Owner = "pod-7"
	c.Dedup = Dedup{Namespace: "orders", Guard: "warn", ReconcileMaxMessages: 5, ReconcileTimeout: time.Minute}
	c.Source = "watermill-forwarder"
	c.Watermill = Watermill{ForwarderTopic: "events", MsgIDMetadata: "idempotency_key"}
	c.HTTP.Listen = "127.0.0.1:9090"
	c.Log = Log{Level: "warn", Format: "json"}
	c.ShutdownTimeout = 40 * time.Second
	require.NoError(t, c.Validate())

	for _, want := range []Config{c, Default()} {
		out, err := want.YAML()
		require.NoError(t, err)
		got, err := load(t, string(out), nil)
		require.NoError(t, err, string(out))
		require.Equal(t, want, *got, string(out))
	}
}

func TestStreamWindowBelowHorizonRefusedWhenGuardRefuses(t *testing.T) {
	t.Parallel()
	yaml := "streams:\n  - name: EVENTS\n    subjects: [\"events.>\"]\n    duplicates: 10s\n"
	_, err := load(t, yaml, nil)
	e := requireConfigError(t, err, "streams[0].duplicates")
	require.Contains(t, e.Allowed, "at least 35s")

	_, err = load(t, yaml+"dedup:\n  guard: warn\n", nil)
	require.NoError(t, err, "warn and off leave the choice to the operator")
}

// TestEmbeddedStreamWindowBelowHorizon: with no stream configured and the
// embedded server, the relay creates EVENTS with a 2m window; timeouts the
// guard would refuse against it are refused at load.
func TestEmbeddedStreamWindowBelowHorizon(t *testing.T) {
	t.Parallel()
	_, err := load(t, "", nil, "--inflight-timeout", "1h")
	e := requireConfigError(t, err, "relay.inflight_timeout")
	require.Equal(t, "1h", e.Value)
	require.Contains(t, e.Allowed, "at most 1m55s")
	require.Contains(t, e.Allowed, "2m duplicate window of the embedded default stream EVENTS")

	_, err = load(t, "", []string{"BRIDGE_RELAY_PUBLISH_TIMEOUT=3m", "BRIDGE_RELAY_ACK_DEADLINE=4m"}, "--inflight-timeout", "5m")
	requireConfigError(t, err, "relay.publish_timeout")

	_, err = load(t, "", nil, "--inflight-timeout", "1m55s")
	require.NoError(t, err, "the horizon fits the window exactly")
	_, err = load(t, "dedup:\n  guard: warn\n", nil, "--inflight-timeout", "1h")
	require.NoError(t, err, "warn and off leave the choice to the operator")
	_, err = load(t, "", nil, "--inflight-timeout", "1h", "--nats-url", "nats://127.0.0.1:4222")
	require.NoError(t, err, "an external server with no stream configured: nothing is created")
	_, err = load(t, "streams:\n  - name: EVENTS\n    subjects: [\"events.>\"]\n    duplicates: 2h\n", nil, "--inflight-timeout", "1h")
	require.NoError(t, err, "a configured stream with a long enough window")
}

func TestStreamDuplicatesWithinMaxAge(t *testing.T) {
	t.Parallel()
	const base = "dedup:\n  guard: off\nstreams:\n  - name: EVENTS\n    subjects: [\"events.>\"]\n"
	_, err := load(t, base+"    duplicates: 1m\n    max_age: 1s\n", nil)
	e := requireConfigError(t, err, "streams[0].duplicates")
	require.Equal(t, "1m", e.Value)
	require.Contains(t, e.Allowed, "streams[0].max_age (1s)")

	_, err = load(t, base+"    max_age: 1m\n", nil)
	e = requireConfigError(t, err, "streams[0].duplicates")
	require.Equal(t, "2m", e.Value, "the default window counts")

	_, err = load(t, base+"    duplicates: 1m\n    max_age: 1m\n", nil)
	require.NoError(t, err, "a window equal to the max age is allowed")
	_, err = load(t, base+"    duplicates: 1m\n    max_age: 0s\n", nil)
	require.NoError(t, err, "max_age 0 is no limit")
}

func TestCheckFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "user.creds")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	missing := filepath.Join(dir, "missing.pem")

	for _, tc := range []struct {
		name string
		edit func(*Config)
		key  string
		want string
	}{
		{"CredsMissing", func(c *Config) { c.NATS.CredsFile = missing }, "nats.creds_file", "no such file or directory"},
		{"CredsDirectory", func(c *Config) { c.NATS.CredsFile = dir }, "nats.creds_file", "it is a directory"},
		{"NkeySeedMissing", func(c *Config) { c.NATS.NkeySeedFile = missing }, "nats.nkey_seed_file", "no such file"},
		{"CAMissing", func(c *Config) { c.NATS.TLS.CAFile = missing }, "nats.tls.ca_file", "no such file"},
		{"CertMissing", func(c *Config) { c.NATS.TLS.CertFile, c.NATS.TLS.KeyFile = missing, file }, "nats.tls.cert_file", "no such file"},
		{"KeyMissing", func(c *Config) { c.NATS.TLS.CertFile, c.NATS.TLS.KeyFile = file, missing }, "nats.tls.key_file", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			tc.edit(&c)
			require.NoError(t, c.Validate(), "Validate does not read files")
			e := requireConfigError(t, c.CheckFiles(), tc.key)
			require.Contains(t, e.Error(), tc.want)
			require.Contains(t, e.Value, dir)
		})
	}

	c := Default()
	c.NATS.CredsFile = file
	c.NATS.TLS = TLS{CAFile: file, CertFile: file, KeyFile: file}
	require.NoError(t, c.CheckFiles())
	d := Default()
	require.NoError(t, d.CheckFiles(), "no file configured")
}

// TestRowsDeletedByProducerOnlyWithTheWAL: wal.rows_deleted_by_producer is
// read with source postgres-wal and refused, naming the key, with any
// other source (rows deleted by their producer are only in the log).
func TestRowsDeletedByProducerOnlyWithTheWAL(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "", []string{"BRIDGE_SOURCE=postgres-wal", "BRIDGE_DATABASE_URL=postgres://db/outbox", "BRIDGE_WAL_ROWS_DELETED_BY_PRODUCER=true"})
	require.NoError(t, err)
	require.True(t, cfg.WAL.RowsDeletedByProducer)
	_, err = load(t, "", []string{"BRIDGE_WAL_ROWS_DELETED_BY_PRODUCER=true"})
	e := requireConfigError(t, err, "wal.rows_deleted_by_producer")
	require.Contains(t, e.Error(), "only with source postgres-wal")
}

// TestNamespaceFor: {schema} and {table} in dedup.namespace give each
// outbox table ids of its own; without them every table has the same
// namespace; watermill-forwarder, whose messages come from no outbox
// table, refuses them.
func TestNamespaceFor(t *testing.T) {
	t.Parallel()
	c := Default()
	c.Dedup.Namespace = "svc-{schema}"
	require.True(t, c.NamespacePerTable())
	require.Equal(t, "svc-tenant_a", c.NamespaceFor("tenant_a.outbox"))
	require.Equal(t, "svc-", c.NamespaceFor("outbox"), "no schema part")
	c.Dedup.Namespace = "{table}"
	require.Equal(t, "tenant_a.outbox", c.NamespaceFor("tenant_a.outbox"))
	c.Dedup.Namespace = "orders"
	require.False(t, c.NamespacePerTable())
	require.Equal(t, "orders", c.NamespaceFor("tenant_a.outbox"))
	require.NoError(t, c.Validate())
	c.Dedup.Namespace, c.Source = "{schema}", SourceWatermillForwarder
	requireConfigError(t, c.Validate(), "dedup.namespace")
}
