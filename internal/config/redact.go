package config

import (
	"slices"

	"github.com/outbox-bridge/bridge/internal/secret"
)

// redacted replaces a secret in Redacted and in error values.
const redacted = secret.Redacted

// Redacted returns a copy of c with secrets replaced by "REDACTED": the password in the
// userinfo and in password= parameters of database.url and wal.replication_url, nats.password, nats.token, ui.token and the
// userinfo password of every nats.url (a user alone there is a token to nats.go, so it is
// replaced too). File paths are not secrets and stay. The URLs are redacted on their text,
// so that one a URL parser cannot read is redacted too (see package secret).
func (c *Config) Redacted() Config {
	out := *c
	out.Streams = slices.Clone(c.Streams)
	out.Database.URL = secret.RedactURL(c.Database.URL)
	out.WAL.ReplicationURL = secret.RedactURL(c.WAL.ReplicationURL)
	out.NATS.URL = secret.RedactNATSURLs(c.NATS.URL)
	if out.NATS.Password != "" {
		out.NATS.Password = redacted
	}
	if out.NATS.Token != "" {
		out.NATS.Token = redacted
	}
	if out.UI.Token != "" {
		out.UI.Token = redacted
	}
	return out
}

// RedactedDatabaseURL is DatabaseURL with its password redacted, for messages.
func (c *Config) RedactedDatabaseURL() string { return secret.RedactURL(c.DatabaseURL()) }
