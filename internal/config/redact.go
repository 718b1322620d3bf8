package config

import (
	"regexp"
	"slices"
	"strings"
)

// redacted replaces a secret in Redacted and in error values.
const redacted = "REDACTED"

// passwordParamRE matches a password parameter of a URL query or a key=value DSN
// ("password=…", "sslpassword='…'").
var passwordParamRE = regexp.MustCompile(`(?i)((?:^|[?&;\s])[a-z_]*password\s*=\s*)('(?:[^'\\]|\\.)*'|[^&;\s]*)`)

// Redacted returns a copy of c with secrets replaced by "REDACTED": the password in the
// userinfo and in password= parameters of database.url and wal.replication_url, nats.password, nats.token and the
// userinfo password of every nats.url (a user alone there is a token to nats.go, so it is
// replaced too). File paths are not secrets and stay.
func (c *Config) Redacted() Config {
	out := *c
	out.Streams = slices.Clone(c.Streams)
	out.Database.URL = redactURL(c.Database.URL, false)
	out.WAL.ReplicationURL = redactURL(c.WAL.ReplicationURL, false)
	out.NATS.URL = redactURL(c.NATS.URL, true)
	if out.NATS.Password != "" {
		out.NATS.Password = redacted
	}
	if out.NATS.Token != "" {
		out.NATS.Token = redacted
	}
	return out
}

// redactURL hides the password of each comma-separated URL in s, and password parameters.
// With userIsSecret, a userinfo without a password (a NATS token) is hidden whole. It works
// on the text, so that a URL net/url cannot parse is redacted too; when unsure it hides more.
func redactURL(s string, userIsSecret bool) string {
	if s == "" {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = redactUserinfo(p, userIsSecret)
	}
	return passwordParamRE.ReplaceAllString(strings.Join(parts, ","), "${1}"+redacted)
}

func redactUserinfo(s string, userIsSecret bool) string {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	start := len(s) - len(rest)
	end := len(rest)
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		end = i
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return s
	}
	userinfo := rest[:at]
	if user, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword {
		userinfo = user + ":" + redacted
	} else if userIsSecret && userinfo != "" {
		userinfo = redacted
	}
	return s[:start] + userinfo + rest[at:]
}
