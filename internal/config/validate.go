package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/secret"
	"github.com/outbox-bridge/bridge/internal/sqlname"
)

// Bounds checked by Validate.
const (
	BatchSizeMax         = 100000
	MaxInFlightMax       = 1000000
	StreamReplicasMax    = 5
	StreamDuplicatesMin  = 100 * time.Millisecond
	StreamMaxAgeMin      = 100 * time.Millisecond // when not 0
	DedupNamespaceMaxLen = 64
	StreamNameMaxLen     = 255 // JSMaxNameLen of nats-server (server/jetstream_api.go)
)

const positiveDurationAllow = "must be a positive duration such as 30s"

var (
	// topicRE is the topic name watermill-sql accepts (disallowedTopicCharacters in
	// watermill-sql pkg/sql/topic.go).
	topicRE = regexp.MustCompile(`^[A-Za-z0-9\-$:._]+$`)

	natsSchemes = []string{"nats", "tls", "ws", "wss"}
)

// Validate checks every key and returns the first bad one as an *Error naming the key, the
// value and what is allowed. It also enforces publish_timeout < ack_deadline <
// inflight_timeout and backoff_initial <= backoff_max.
func (c *Config) Validate() error {
	checks := []func() error{
		c.validateTop,
		c.validateDatabase,
		c.validateNATS,
		c.validateStreams,
		c.validateRelay,
		c.validateDedup,
		c.validateSource,
		c.validateServer,
		c.validateUI,
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) validateTop() error {
	if strings.TrimSpace(c.DataDir) == "" {
		return &Error{Key: "data_dir", Value: c.DataDir, Allowed: "must be a directory path"}
	}
	return nil
}

func (c *Config) validateDatabase() error {
	if u := c.Database.URL; u != "" {
		bad := func(allowed string) error {
			return &Error{Key: "database.url", Value: secret.RedactURL(u), Allowed: allowed}
		}
		scheme, dialect, ok := outbox.SchemeOf(u)
		switch {
		case !ok:
			return bad("must start with " + orList(outbox.Schemes) + " (sqlite:PATH), or be empty for sqlite:<data_dir>/outbox.db")
		case dialect == outbox.DialectSQLite && sqlitePathEmpty(u):
			return bad("must name a file after " + scheme + ", such as " + outbox.SQLiteURL("./outbox.db"))
		case len(u) == len(scheme):
			return bad("must name a host and database after " + scheme + ", such as " + scheme + "user:password@host:port/database")
		case dialect == outbox.DialectMySQL && outbox.HoldsMySQLDSN(u):
			// mysql://user:password@tcp(host:port)/db: the go-sql-driver DSN
			// after the scheme, parsed by the driver when the database opens.
		case dialect != outbox.DialectSQLite:
			// Checked on its text first: a parser's message about a URL
			// whose password holds '#', '?' or '/' quotes part of it.
			parsed, err := secret.CheckURL(u, secret.RedactURL)
			if err != nil {
				var uerr *secret.URLError
				errors.As(err, &uerr)
				hint := ""
				if dialect == outbox.DialectMySQL {
					hint = "; or a go-sql-driver DSN after mysql:// such as mysql://user:password@tcp(host:port)/database"
				}
				return bad("must be a valid URL: " + uerr.Reason + hint)
			}
			if name := secret.MySQLPasswordParam(parsed); name != "" {
				return bad("must not hold the password as the parameter " + name + ": " + secret.MySQLPasswordParamWhy)
			}
		}
	}
	if c.Database.TablesRefresh < time.Second {
		return &Error{Key: "database.tables_refresh", Value: c.Database.TablesRefresh.String(), Allowed: "must be at least 1s: each refresh lists the database's tables"}
	}
	if err := positive("database.conn_max_lifetime", c.Database.ConnMaxLifetime); err != nil {
		return err
	}
	if err := positive("database.conn_max_idle_time", c.Database.ConnMaxIdleTime); err != nil {
		return err
	}
	if err := positive("database.connect_timeout", c.Database.ConnectTimeout); err != nil {
		return err
	}
	if err := sqlname.Check(c.Database.Table); err != nil {
		return &Error{
			Key:     "database.table",
			Value:   c.Database.Table,
			Allowed: "must be " + sqlname.Rule + ": " + err.Error(),
		}
	}
	if c.DatabaseDialect() == outbox.DialectSQLite && strings.Contains(c.Database.Table, ".") {
		return &Error{Key: "database.table", Value: c.Database.Table, Allowed: "must be a table name without a schema with a SQLite database (sqlite:), which has no schemas"}
	}
	for i, t := range c.Database.Tables {
		key := fmt.Sprintf("database.tables[%d]", i)
		if err := outbox.CheckTablePattern(t); err != nil {
			return &Error{Key: key, Value: t, Allowed: "must be " + outbox.PatternRule + ": " + err.Error()}
		}
		if c.DatabaseDialect() == outbox.DialectSQLite && strings.Contains(t, ".") {
			return &Error{Key: key, Value: t, Allowed: "must be a table name or pattern without a schema with a SQLite database (sqlite:), which has no schemas"}
		}
		if slices.Contains(c.Database.Tables[:i], t) {
			return &Error{Key: key, Value: t, Allowed: "must differ from the tables before it"}
		}
	}
	return nil
}

// sqlitePathEmpty reports whether the SQLite URL u names no file
// ("sqlite:", "sqlite://").
func sqlitePathEmpty(u string) bool {
	path, _ := outbox.SQLitePath(u)
	return path == ""
}

// orList joins items as "a, b, c or d".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

func (c *Config) validateNATS() error {
	n := &c.NATS
	if ok, why := validNATSURLs(n.URL); !c.EmbeddedNATS() && !ok {
		return &Error{
			Key:     "nats.url",
			Value:   secret.RedactNATSURLs(n.URL),
			Allowed: "must be embedded or a comma-separated list of nats://, tls://, ws:// or wss:// URLs" + why,
		}
	}
	if !validHostPort(n.Listen, true) {
		return &Error{Key: "nats.listen", Value: n.Listen, Allowed: "must be host:port such as 127.0.0.1:4222"}
	}
	type method struct{ key, value string }
	var methods []method
	for _, m := range []method{
		{"nats.creds_file", n.CredsFile},
		{"nats.nkey_seed_file", n.NkeySeedFile},
		{"nats.user", n.User},
		{"nats.token", n.Token},
	} {
		if m.value != "" {
			methods = append(methods, m)
		}
	}
	if len(methods) > 1 {
		value := methods[1].value
		if methods[1].key == "nats.token" {
			value = redacted
		}
		return &Error{
			Key:     methods[1].key,
			Value:   value,
			Allowed: "must not be set together with " + methods[0].key + ": choose one of creds_file, nkey_seed_file, user/password or token",
		}
	}
	if n.Password != "" && n.User == "" {
		return &Error{Key: "nats.password", Value: redacted, Allowed: "needs nats.user"}
	}
	if (n.TLS.CertFile == "") != (n.TLS.KeyFile == "") {
		key, value, other := "nats.tls.cert_file", n.TLS.CertFile, "nats.tls.key_file"
		if n.TLS.CertFile == "" {
			key, value, other = other, n.TLS.KeyFile, key
		}
		return &Error{Key: key, Value: value, Allowed: "needs " + other + " (a client certificate takes both)"}
	}
	return nil
}

// validNATSURLs reports whether s is a list of NATS URLs; when not, why
// may say more, about the redacted URLs (see secret.CheckURL): ": …".
func validNATSURLs(s string) (ok bool, why string) {
	if strings.TrimSpace(s) == "" {
		return false, ""
	}
	for part := range strings.SplitSeq(s, ",") {
		u, err := secret.CheckURL(strings.TrimSpace(part), secret.RedactNATSURLs)
		var uerr *secret.URLError
		switch {
		case errors.As(err, &uerr) && strings.Contains(s, ","):
			// The part may be a piece of a password cut at its comma,
			// with no userinfo left to redact: its parse error would
			// quote it.
			return false, "; URLs are split at commas: percent-encode a comma in a password or token as %2C, and the characters URLs reserve"
		case errors.As(err, &uerr):
			return false, ": " + uerr.Reason
		}
		if u.Host == "" || !containsFold(natsSchemes, u.Scheme) {
			return false, ""
		}
	}
	return true, ""
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// validHostPort reports whether s is host:port with a numeric port 0-65535; the host may be
// empty unless hostRequired.
func validHostPort(s string, hostRequired bool) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || (hostRequired && host == "") || strings.ContainsFunc(host, unicode.IsSpace) {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

func (c *Config) validateStreams() error {
	seen := make(map[string]int)
	for i, s := range c.Streams {
		key := func(k string) string { return fmt.Sprintf("streams[%d].%s", i, k) }
		if !validStreamName(s.Name) {
			return &Error{
				Key:     key("name"),
				Value:   s.Name,
				Allowed: "must be a JetStream stream name: 1 to 255 characters without spaces, '.', '*', '>', '/' or '\\'",
			}
		}
		if j, dup := seen[s.Name]; dup {
			return &Error{Key: key("name"), Value: s.Name, Allowed: fmt.Sprintf("must be unique; streams[%d] has the same name", j)}
		}
		seen[s.Name] = i
		if len(s.Subjects) == 0 {
			return &Error{Key: key("subjects"), Value: "", Allowed: "must list at least one subject"}
		}
		for j, sub := range s.Subjects {
			if !validSubject(sub) {
				return &Error{
					Key:     fmt.Sprintf("streams[%d].subjects[%d]", i, j),
					Value:   sub,
					Allowed: "must be a NATS subject: dot-separated non-empty tokens without spaces; * and > only as whole tokens, > only last",
				}
			}
		}
		if s.Duplicates < StreamDuplicatesMin {
			return &Error{Key: key("duplicates"), Value: fmtDuration(s.Duplicates), Allowed: "must be a duration of at least 100ms such as 2m"}
		}
		if s.Replicas < 0 || s.Replicas > StreamReplicasMax {
			return &Error{Key: key("replicas"), Value: strconv.Itoa(s.Replicas), Allowed: "must be an integer from 1 to 5, or 0 for auto (3 on a cluster of three or more servers, else 1)"}
		}
		if s.Replicas > 1 && c.EmbeddedNATS() {
			return &Error{Key: key("replicas"), Value: strconv.Itoa(s.Replicas), Allowed: "must be 1 with nats.url embedded (one server holds one replica)"}
		}
		if s.Storage != StorageFile && s.Storage != StorageMemory {
			return &Error{Key: key("storage"), Value: s.Storage, Allowed: "must be one of file, memory"}
		}
		// nats-server refuses the next two when the stream is created
		// (server/stream.go, checkStreamCfgLocked): "max age needs to be
		// >= 100ms", "duplicates window can not be larger then max age".
		if s.MaxAge < 0 || (s.MaxAge > 0 && s.MaxAge < StreamMaxAgeMin) {
			return &Error{Key: key("max_age"), Value: fmtDuration(s.MaxAge), Allowed: "must be 0 (no limit) or a duration of at least 100ms such as 168h"}
		}
		if s.MaxAge > 0 && s.Duplicates > s.MaxAge {
			return &Error{Key: key("duplicates"), Value: fmtDuration(s.Duplicates),
				Allowed: fmt.Sprintf("must not be longer than %s (%s): JetStream refuses a duplicate window longer than the max age (duplicates defaults to %s)",
					key("max_age"), fmtDuration(s.MaxAge), fmtDuration(StreamDuplicatesDefault))}
		}
	}
	return c.validateStreamSubjects()
}

// jsAPISubjects are JetStream's API subjects; nats-server refuses a stream
// that covers them (unless it never acks).
const jsAPISubjects = "$JS.API.>"

// validateStreamSubjects refuses what nats-server would refuse when the
// streams are created: subjects that overlap, within one stream or across
// two, and subjects that cover JetStream's API. Overlap is nats-server's
// own test (server.SubjectsCollide).
func (c *Config) validateStreamSubjects() error {
	type subj struct{ key, value string }
	var all []subj
	for i, s := range c.Streams {
		for j, sub := range s.Subjects {
			key := fmt.Sprintf("streams[%d].subjects[%d]", i, j)
			if server.SubjectsCollide(sub, jsAPISubjects) {
				return &Error{Key: key, Value: sub, Allowed: "must not cover JetStream's API subjects (" + jsAPISubjects + "); name the events' subjects, such as events.>"}
			}
			for _, o := range all {
				if server.SubjectsCollide(sub, o.value) {
					return &Error{Key: key, Value: sub, Allowed: fmt.Sprintf("must not overlap %s (%s): JetStream stores a subject in one stream only", o.key, o.value)}
				}
			}
			all = append(all, subj{key, sub})
		}
	}
	return nil
}

// validStreamName follows nats.go jetstream validateStreamName and nats-server
// isValidAssetName: not empty, no whitespace, '.', '*', '>', '/' or '\', at most
// JSMaxNameLen bytes. Control characters are refused too.
func validStreamName(s string) bool {
	return s != "" && len(s) <= StreamNameMaxLen &&
		!strings.ContainsAny(s, ".*>/\\") &&
		!strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })
}

// validSubject reports whether s is a NATS subject or subject filter.
func validSubject(s string) bool {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return false
	}
	tokens := strings.Split(s, ".")
	for i, t := range tokens {
		switch {
		case t == "":
			return false
		case t == ">":
			if i != len(tokens)-1 {
				return false
			}
		case t == "*":
		case strings.ContainsAny(t, "*>"):
			return false
		}
	}
	return true
}

func (c *Config) validateRelay() error {
	r := &c.Relay
	if r.BatchSize < 1 || r.BatchSize > BatchSizeMax {
		return &Error{Key: "relay.batch_size", Value: strconv.Itoa(r.BatchSize), Allowed: "must be an integer from 1 to 100000"}
	}
	if r.MaxInFlight < 1 || r.MaxInFlight > MaxInFlightMax {
		return &Error{Key: "relay.max_in_flight", Value: strconv.Itoa(r.MaxInFlight), Allowed: "must be an integer from 1 to 1000000"}
	}
	if r.MaxInFlightBytes < 1 {
		return &Error{Key: "relay.max_in_flight_bytes", Value: r.MaxInFlightBytes.String(), Allowed: "must be a size of at least 1 byte such as 32MiB"}
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{
		{"relay.poll_interval", r.PollInterval},
		{"relay.inflight_timeout", r.InflightTimeout},
		{"relay.ack_deadline", r.AckDeadline},
		{"relay.publish_timeout", r.PublishTimeout},
	} {
		if err := positive(d.key, d.d); err != nil {
			return err
		}
	}
	if r.MaxAttempts < 1 {
		return &Error{Key: "relay.max_attempts", Value: strconv.Itoa(r.MaxAttempts), Allowed: "must be an integer of at least 1"}
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{
		{"relay.backoff_initial", r.BackoffInitial},
		{"relay.backoff_max", r.BackoffMax},
		{"relay.retention", r.Retention},
	} {
		if err := positive(d.key, d.d); err != nil {
			return err
		}
	}
	if r.StallAfter < time.Second {
		return &Error{Key: "relay.stall_after", Value: fmtDuration(r.StallAfter), Allowed: "must be at least 1s"}
	}
	if r.StallUnhealthyAfter < 0 {
		return &Error{Key: "relay.stall_unhealthy_after", Value: fmtDuration(r.StallUnhealthyAfter), Allowed: "must be 0 (never) or positive"}
	}
	// The owner is written into every lease (MySQL's owner column is
	// VARCHAR(255)) and into the session name that pg_stat_activity and
	// SHOW PROCESSLIST print on one line.
	if strings.TrimSpace(r.Owner) == "" || len(r.Owner) > 200 || strings.ContainsFunc(r.Owner, unicode.IsControl) {
		return &Error{Key: "relay.owner", Value: r.Owner, Allowed: "must be a non-empty name of at most 200 bytes without control characters (tab, newline, …), unique per replica, such as <hostname>-<pid>"}
	}
	if r.PublishTimeout > r.AckDeadline-PublishTimeoutMargin {
		return &Error{
			Key:   "relay.publish_timeout",
			Value: fmtDuration(r.PublishTimeout),
			Allowed: "must be at least " + fmtDuration(PublishTimeoutMargin) + " shorter than relay.ack_deadline (" + fmtDuration(r.AckDeadline) +
				"): the rest of the deadline is for learning why a publish got no PubAck (the broker's outage, whose rows are held, or the row's own fault)",
		}
	}
	if r.AckDeadline >= r.InflightTimeout {
		return &Error{
			Key:     "relay.ack_deadline",
			Value:   fmtDuration(r.AckDeadline),
			Allowed: "must be shorter than relay.inflight_timeout (" + fmtDuration(r.InflightTimeout) + ")",
		}
	}
	if r.BackoffInitial > r.BackoffMax {
		return &Error{
			Key:     "relay.backoff_initial",
			Value:   fmtDuration(r.BackoffInitial),
			Allowed: "must not be longer than relay.backoff_max (" + fmtDuration(r.BackoffMax) + ")",
		}
	}
	return nil
}

func positive(key string, d time.Duration) error {
	if d <= 0 {
		return &Error{Key: key, Value: fmtDuration(d), Allowed: positiveDurationAllow}
	}
	return nil
}

func (c *Config) validateDedup() error {
	d := &c.Dedup
	if len(d.Namespace) > DedupNamespaceMaxLen ||
		strings.ContainsFunc(d.Namespace, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return &Error{Key: "dedup.namespace", Value: d.Namespace, Allowed: "must be empty or at most 64 visible ASCII characters"}
	}
	if c.NamespacePerTable() && c.Source == SourceWatermillForwarder {
		return &Error{Key: "dedup.namespace", Value: d.Namespace, Allowed: "must not hold {schema} or {table} with source: watermill-forwarder, whose messages come from no outbox table"}
	}
	if err := oneOf("dedup.guard", d.Guard, GuardRefuse, GuardWarn, GuardOff); err != nil {
		return err
	}
	if d.ReconcileMaxMessages < 1 {
		return &Error{Key: "dedup.reconcile_max_messages", Value: strconv.Itoa(d.ReconcileMaxMessages), Allowed: "must be an integer of at least 1"}
	}
	if err := positive("dedup.reconcile_timeout", d.ReconcileTimeout); err != nil {
		return err
	}
	// A stream the relay would create and then refuse (the guard never
	// changes an existing stream) is refused here, before it exists: a
	// configured stream, or the embedded default EVENTS, whose window is
	// not configurable, so the relay's timeouts are at fault.
	horizon := c.Relay.InflightTimeout + c.Relay.PublishTimeout
	if d.Guard != GuardRefuse {
		return nil
	}
	for i, s := range c.EffectiveStreams() {
		if s.Duplicates >= horizon {
			continue
		}
		if len(c.Streams) == 0 && c.Relay.PublishTimeout >= s.Duplicates {
			return &Error{Key: "relay.publish_timeout", Value: fmtDuration(c.Relay.PublishTimeout),
				Allowed: fmt.Sprintf("must be well below the %s duplicate window of the embedded default stream %s while dedup.guard is refuse; configure streams with a longer duplicates window, or set dedup.guard to warn or off",
					fmtDuration(s.Duplicates), s.Name)}
		}
		if len(c.Streams) == 0 {
			return &Error{Key: "relay.inflight_timeout", Value: fmtDuration(c.Relay.InflightTimeout),
				Allowed: fmt.Sprintf("must be at most %s while dedup.guard is refuse: relay.inflight_timeout + relay.publish_timeout (%s) must fit in the %s duplicate window of the embedded default stream %s; configure streams with a longer duplicates window, or set dedup.guard to warn or off",
					fmtDuration(s.Duplicates-c.Relay.PublishTimeout), fmtDuration(horizon), fmtDuration(s.Duplicates), s.Name)}
		}
		return &Error{Key: fmt.Sprintf("streams[%d].duplicates", i), Value: fmtDuration(s.Duplicates),
			Allowed: fmt.Sprintf("the duplicate window of stream %s must be at least %s (relay.inflight_timeout + relay.publish_timeout) while dedup.guard is refuse", s.Name, fmtDuration(horizon))}
	}
	return nil
}

func (c *Config) validateSource() error {
	if err := oneOf("source", c.Source, SourceTable, SourcePostgresWAL, SourceMySQLBinlog, SourceWatermillForwarder); err != nil {
		return err
	}
	if err := c.validateWAL(); err != nil {
		return err
	}
	if err := c.validateBinlog(); err != nil {
		return err
	}
	if !topicRE.MatchString(c.Watermill.ForwarderTopic) {
		return &Error{
			Key:     "watermill.forwarder_topic",
			Value:   c.Watermill.ForwarderTopic,
			Allowed: "must be a watermill-sql topic: letters, digits, -, $, :, . or _",
		}
	}
	// watermill-sql has schema adapters for PostgreSQL and MySQL only.
	if c.Source == SourceWatermillForwarder && c.DatabaseDialect() == outbox.DialectSQLite {
		return &Error{
			Key:     "database.url",
			Value:   c.DatabaseURL(),
			Allowed: "must be a postgres://… or mysql://… URL with source: watermill-forwarder (watermill-sql has no SQLite schema)",
		}
	}
	return nil
}

// walNameRE is what a replication slot name may be (PostgreSQL's
// ReplicationSlotValidateName: lowercase letters, digits and underscores,
// at most NAMEDATALEN-1 bytes); publication names follow the same rule so
// that they need no quoting.
var walNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

func (c *Config) validateWAL() error {
	w := &c.WAL
	for _, n := range []struct{ key, value string }{{"wal.slot", w.Slot}, {"wal.publication", w.Publication}} {
		if !walNameRE.MatchString(n.value) {
			return &Error{Key: n.key, Value: n.value, Allowed: "must be 1 to 63 lowercase letters, digits or _ (a PostgreSQL replication slot or publication name)"}
		}
	}
	if err := positive("wal.sweep_interval", w.SweepInterval); err != nil {
		return err
	}
	if w.RowsDeletedByProducer && c.Source != SourcePostgresWAL {
		return &Error{Key: "wal.rows_deleted_by_producer", Value: "true", Allowed: "only with source postgres-wal (rows deleted by their producer exist only in the write-ahead log)"}
	}
	if u := w.ReplicationURL; u != "" {
		if _, d, _ := outbox.SchemeOf(u); d != outbox.DialectPostgres {
			return &Error{Key: "wal.replication_url", Value: secret.RedactURL(u), Allowed: "must be a postgres:// or postgresql:// URL, or empty for database.url"}
		}
		// Checked on its text first, as database.url (see validateDatabase).
		if _, err := secret.CheckURL(u, secret.RedactURL); err != nil {
			var uerr *secret.URLError
			errors.As(err, &uerr)
			return &Error{Key: "wal.replication_url", Value: secret.RedactURL(u), Allowed: "must be a valid URL: " + uerr.Reason}
		}
	}
	if c.Source != SourcePostgresWAL {
		return nil
	}
	if c.DatabaseDialect() != outbox.DialectPostgres {
		allowed := "must be a postgres:// or postgresql:// URL with source: postgres-wal (it reads PostgreSQL's write-ahead log)"
		if c.Database.URL == "" {
			allowed += "; no database.url is set, so this is the embedded default: set --database-url (BRIDGE_DATABASE_URL)"
		}
		return &Error{Key: "database.url", Value: secret.RedactURL(c.DatabaseURL()), Allowed: allowed}
	}
	return nil
}

func (c *Config) validateBinlog() error {
	if err := positive("binlog.sweep_interval", c.Binlog.SweepInterval); err != nil {
		return err
	}
	if id := c.Binlog.ServerID; id < 0 || id > math.MaxUint32 {
		return &Error{Key: "binlog.server_id", Value: strconv.FormatInt(id, 10), Allowed: "must be 0 (derived from the table's name) or a server_id from 1 to 4294967295, unique among the server's replicas"}
	}
	if c.Source != SourceMySQLBinlog {
		return nil
	}
	if c.DatabaseDialect() != outbox.DialectMySQL {
		allowed := "must be a mysql:// URL with source: mysql-binlog (it reads the binary log of MySQL or MariaDB)"
		if c.Database.URL == "" {
			allowed += "; no database.url is set, so this is the embedded default: set --database-url (BRIDGE_DATABASE_URL)"
		}
		return &Error{Key: "database.url", Value: secret.RedactURL(c.DatabaseURL()), Allowed: allowed}
	}
	if len(c.Database.Tables) > 0 {
		return &Error{Key: "database.tables", Value: strings.Join(c.Database.Tables, ","),
			Allowed: "one table with source: mysql-binlog (database.table, or one --table without *); run a relay per table"}
	}
	return nil
}

func (c *Config) validateServer() error {
	if !validHostPort(c.HTTP.Listen, false) {
		return &Error{Key: "http.listen", Value: c.HTTP.Listen, Allowed: "must be host:port or :port such as :8080"}
	}
	if err := oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error"); err != nil {
		return err
	}
	if err := oneOf("log.format", c.Log.Format, LogFormatAuto, LogFormatJSON, LogFormatText); err != nil {
		return err
	}
	return positive("shutdown_timeout", c.ShutdownTimeout)
}

func (c *Config) validateUI() error {
	u := &c.UI
	switch {
	case u.Token != "" && len(u.Token) < UITokenMinBytes:
		return &Error{Key: "ui.token", Value: redacted, Allowed: fmt.Sprintf("must be at least %d bytes (a random value, e.g. openssl rand -hex 32)", UITokenMinBytes)}
	case u.Token != "" && strings.ContainsFunc(u.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return &Error{Key: "ui.token", Value: redacted, Allowed: "must not contain spaces or control characters"}
	case u.Enabled && u.Token == "" && !u.ReadOnlyWithoutToken:
		return &Error{Key: "ui.token", Value: "", Allowed: "must be set when ui.enabled is true (or set ui.read_only_without_token for a console without actions)"}
	}
	return nil
}

func oneOf(key, value string, allowed ...string) error {
	for _, a := range allowed {
		if value == a {
			return nil
		}
	}
	return &Error{Key: key, Value: value, Allowed: "must be one of " + strings.Join(allowed, ", ")}
}

// CheckFiles checks that each file the NATS connection reads
// (nats.creds_file, nats.nkey_seed_file, nats.tls.ca_file, cert_file and
// key_file) is set to a regular file this process can open, and returns an
// *Error naming the first key that is not. Validate does not read the file
// system; the commands that connect to NATS (run, including
// --check-config, and tail) call CheckFiles too, so that commands that
// only use the outbox keep working where the NATS secrets are not mounted.
func (c *Config) CheckFiles() error {
	for _, f := range []struct{ key, path string }{
		{"nats.creds_file", c.NATS.CredsFile},
		{"nats.nkey_seed_file", c.NATS.NkeySeedFile},
		{"nats.tls.ca_file", c.NATS.TLS.CAFile},
		{"nats.tls.cert_file", c.NATS.TLS.CertFile},
		{"nats.tls.key_file", c.NATS.TLS.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		if why := unreadable(f.path); why != "" {
			return &Error{Key: f.key, Value: f.path, Allowed: "must name a readable file: " + why}
		}
	}
	return nil
}

// unreadable says why path cannot be read as a file, or returns "".
func unreadable(path string) string {
	fh, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) { // the path is in the message already
			return pe.Err.Error()
		}
		return err.Error()
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return err.Error()
	}
	if info.IsDir() {
		return "it is a directory"
	}
	return ""
}
