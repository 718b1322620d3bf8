package secret_test

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/secret"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"postgres://app:S3cr#t99@db.example:5432/app":         "postgres://app:REDACTED@db.example:5432/app",
		"postgres://app:S3cr/t99@db.example:5432/app":         "postgres://app:REDACTED@db.example:5432/app",
		"postgres://app:p%40ss@db:5432/app?sslmode=require":   "postgres://app:REDACTED@db:5432/app?sslmode=require",
		"postgres://app@db:5432/app":                          "postgres://app@db:5432/app",
		"postgres://db:5432/app?user=app&password=s3cret&x=1": "postgres://db:5432/app?user=app&password=REDACTED&x=1",
		// Names that say "password" once percent-decoded, as pgx reads them.
		"postgres://db/app?sslmode=disable&pass%77ord=SECRETD": "postgres://db/app?sslmode=disable&pass%77ord=REDACTED",
		"postgres://db/app?%70assword=SECRETE&x=1":             "postgres://db/app?%70assword=REDACTED&x=1",
		"postgres://db/app?SSLPASS%57ORD=SECRETS":              "postgres://db/app?SSLPASS%57ORD=REDACTED",
		"postgres://db/app?user=app&password%3DSECRETP&x=%41":  "postgres://db/app?user=app&password=REDACTED&x=%41",
		"postgres://db/app?passw%6Frdx=kept&p%61th=/a%20b":     "postgres://db/app?passw%6Frdx=kept&p%61th=/a%20b",
		"mysql://app:pw@tcp(db:3306)/app":                      "mysql://app:REDACTED@tcp(db:3306)/app",
		"mysql://app:a@b@db:3306/app":                          "mysql://app:REDACTED@db:3306/app",
		`host=db user=app password='it\'s' dbname=app`:         "host=db user=app password=REDACTED dbname=app",
		"sqlite:./bridge@data/outbox.db":                       "sqlite:./bridge@data/outbox.db",
		"app:pw@db/app":                                        "REDACTED@db/app",
		"postgres://u:p@db/app?sslrootcert=/etc/a@b.pem":       "postgres://u:REDACTED@b.pem",
		"": "",
	} {
		require.Equal(t, want, secret.RedactURL(raw), raw)
	}
}

func TestRedactNATSURLs(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"nats://tok@n1:4222":                          "nats://REDACTED@n1:4222",
		"nats://app:pw@n1:4222,nats://app:pw@n2:4222": "nats://REDACTED@n1:4222,nats://REDACTED@n2:4222",
		"nats://n1:4222, tls://app:pw@n2:4222":        "nats://n1:4222, tls://REDACTED@n2:4222",
		"nats://app:a,b@n1:4222":                      "nats://REDACTED@n1:4222",
		"nats://to,k@n1:4222,nats://n2":               "nats://REDACTED@n1:4222,nats://n2",
		"nats://tok:en@n1:4222":                       "nats://REDACTED@n1:4222", // a token may hold a ':'
		"nats://n1:4222?password=pw":                  "nats://n1:4222?password=REDACTED",
		"nats://n1:4222?x=1,nats://n2?pass%77ord=pw":  "nats://n1:4222?x=1,nats://n2?pass%77ord=REDACTED",
		"embedded": "embedded",
		"nats://app:pw@n1:4222,nats://n2:4222,nats://n3": "nats://REDACTED@n1:4222,nats://n2:4222,nats://n3",
	} {
		require.Equal(t, want, secret.RedactNATSURLs(raw), raw)
	}
}

func TestAgrees(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{
		"postgres://app:p%40ss@db/app":                   true,
		"postgres://app:p:a:ss@db/app":                   true,
		"postgres://db/app":                              true,
		"postgres://app:123#456@db/app":                  false, // the parser takes 123 for the port
		"postgres://app:12/34@db/app":                    false, // … and /34@db/app for the path
		"postgres://app:1?2@db/app":                      false,
		"postgres://u:p@db/app?sslrootcert=/etc/a@b.pem": false, // an @ after the host: encode it as %40
		"postgres://u:p@db/app?sslrootcert=/etc/a%40b":   true,
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err, raw)
		require.Equal(t, want, secret.Agrees(raw, u.User), raw)
	}
}

// TestCheckURLRefusesAnUnencodedAt: a userinfo that holds an '@' is read
// as written by net/url (the last '@' ends it) but not by libpq and pgx
// (the first '@'): refused, saying how to encode it, for every scheme.
func TestCheckURLRefusesAnUnencodedAt(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"postgres://bob:S@xcret3@127.0.0.1:5432/test",
		"postgresql://b@b:Sxcret3@127.0.0.1/test",
		"mysql://bob:S@x@127.0.0.1:3306/test",
		"nats://to@ken@127.0.0.1:4222",
	} {
		_, err := secret.CheckURL(raw, secret.RedactURL)
		require.Error(t, err, raw)
		require.Contains(t, err.Error(), "unencoded @", raw)
		require.Contains(t, err.Error(), "%40", raw)
		require.NotContains(t, err.Error(), "xcret", raw)
	}
	for _, raw := range []string{"postgres://bob:S%40xcret3@127.0.0.1:5432/test", "nats://to%40ken@127.0.0.1:4222"} {
		_, err := secret.CheckURL(raw, secret.RedactURL)
		require.NoError(t, err, raw)
	}
}

const specials = " !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// TestRedactionHidesEveryPassword: passwords of random printable special
// characters (with marker letters, so that a window found is the
// password's), written as they are or percent-encoded into URLs of every
// kind: neither the redacted URL nor CheckURL's error holds three
// characters of one in a row. cmd/bridge's TestSecretsNeverPrintedProperty
// runs the commands.
func TestRedactionHidesEveryPassword(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	templates := []struct {
		url    string
		redact func(string) string
		encode func(string) string
	}{
		{"postgres://app:%s@db:5432/app?sslmode=disable", secret.RedactURL, nil},
		{"postgres://app:%s@db:5432/app?sslmode=disable", secret.RedactURL, url.PathEscape},
		{"postgres://db:5432/app?user=app&password=%s", secret.RedactURL, url.QueryEscape},
		{"postgres://db:5432/app?user=app&pass%%77ord=%s", secret.RedactURL, url.QueryEscape},
		{"postgres://db:5432/app?sslmode=disable&%%70ASSWORD=%s", secret.RedactURL, url.QueryEscape},
		{"postgres://db:5432/app?user=app&password%%3D%s", secret.RedactURL, url.QueryEscape},
		{"nats://n1:4222?pass%%77ord=%s", secret.RedactNATSURLs, url.QueryEscape},
		{"mysql://app:%s@db:3306/app", secret.RedactURL, nil},
		{"mysql://app:%s@tcp(db:3306)/app", secret.RedactURL, nil},
		{"nats://%s@n1:4222", secret.RedactNATSURLs, nil},
		{"nats://app:%s@n1:4222", secret.RedactNATSURLs, nil},
		{"nats://app:%[1]s@n1:4222, nats://app:%[1]s@n2:4222", secret.RedactNATSURLs, nil},
		{"nats://%[1]s@n1:4222,nats://n2:4222,nats://%[1]s@n3:4222", secret.RedactNATSURLs, nil},
	}
	for range 500 {
		b := []byte(specials)
		rng.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
		b = b[:1+rng.IntN(len(b))]
		var pw strings.Builder
		for i := 0; i < len(b); i += 2 {
			pw.WriteByte("QX"[rng.IntN(2)])
			pw.Write(b[i:min(i+2, len(b))])
		}
		password := pw.String()
		for _, tpl := range templates {
			in := password
			if tpl.encode != nil {
				in = tpl.encode(password)
			}
			raw := fmt.Sprintf(tpl.url, in)
			shown := []string{tpl.redact(raw)}
			if _, err := secret.CheckURL(raw, tpl.redact); err != nil {
				shown = append(shown, err.Error())
			}
			for _, s := range shown {
				for i := 0; i+3 <= len(password); i++ {
					w := password[i : i+3]
					require.False(t, strings.ContainsAny(w, "QX") && strings.Contains(s, w), "%q holds %q of %q (URL %q)", s, w, password, raw)
				}
			}
		}
	}
}
