// Package secret finds the secrets of connection URLs in their text and
// hides them, before any parser sees the URL.
//
// A URL parser stops at '#', '?' or '/': a password that holds one of them
// unencoded is split into a host, a port, a path or a fragment, and the
// parser's own error message prints that part back ("invalid port
// \":S3cr\" after host"). Worse, the URL may parse, with part of the
// password taken as the port or the path, and a connection error prints
// it. So the functions here never parse: the userinfo of a URL is all the
// text between "://" and the last '@', whatever the characters in it; when
// that is more than a parser would take (an '@' in a query value), more is
// hidden, never less. Agrees tells whether a parser read the userinfo the
// same way; configuration refuses URLs where it did not.
package secret

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
)

// Redacted replaces a secret in text shown to people.
const Redacted = "REDACTED"

// userinfo returns the bounds of the userinfo of one URL in s: from just
// after the first "://" (or the start, when s has none) to the last '@'.
// ok is false when s has no '@' after the scheme.
func userinfo(s string) (start, end int, ok bool) {
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	end = strings.LastIndex(s, "@")
	return start, end, end >= start
}

// Userinfo returns the user and password that the text of raw holds: the
// userinfo is between "://" and the last '@', the user before its first
// ':' and the password after it (hasPassword). Both are as written, not
// percent-decoded. ok is false when raw has no userinfo.
func Userinfo(raw string) (user, password string, hasPassword, ok bool) {
	start, end, ok := userinfo(raw)
	if !ok {
		return "", "", false, false
	}
	user, password, hasPassword = strings.Cut(raw[start:end], ":")
	return user, password, hasPassword, true
}

// passwordParamRE matches a password parameter of a URL query or a
// key=value DSN ("password=…", "sslpassword='…'"), up to the next
// parameter or the end.
var passwordParamRE = regexp.MustCompile(`(?i)((?:^|[?&;\s])[a-z_]*password\s*=\s*)('(?:[^'\\]|\\.)*'|[^&;\s]*)`)

// RedactURL returns the database URL raw with its password replaced by
// Redacted: the password of its userinfo (the user stays; all of a
// userinfo before "://", which would be no URL, is hidden) and password
// parameters of its query or of a key=value DSN. A sqlite: URL holds no
// userinfo. It reads the text only and never fails.
func RedactURL(raw string) string {
	if !strings.HasPrefix(raw, "sqlite:") {
		raw = redactUserinfo(raw, false)
	}
	return redactEncodedParams(passwordParamRE.ReplaceAllString(raw, "${1}"+Redacted))
}

// redactEncodedParams hides the value of every query parameter of the URL
// s whose name, percent-decoded, ends in "password" (case-insensitively):
// "pass%77ord=…", "%70assword=…", or "password%3D…", whose '=' is encoded
// too. URL parsers decode the names of a query's parameters (net/url's
// Query, which pgx reads the URL with), so such a parameter is a password
// to the driver while its text does not say so.
func redactEncodedParams(s string) string {
	q := strings.IndexByte(s, '?')
	if q < 0 || !strings.Contains(s[q:], "%") {
		return s
	}
	params := strings.Split(s[q+1:], "&")
	for i, p := range params {
		name, _, hasValue := strings.Cut(p, "=")
		if !strings.Contains(name, "%") {
			continue
		}
		decoded, err := url.QueryUnescape(name)
		if err != nil {
			continue // a parser refuses the URL, naming the escape, not a value
		}
		decodedName, _, encodedValue := strings.Cut(decoded, "=")
		if !strings.HasSuffix(strings.ToLower(strings.TrimSpace(decodedName)), "password") {
			continue
		}
		switch {
		case hasValue:
			params[i] = name + "=" + Redacted
		case encodedValue:
			params[i] = url.QueryEscape(decodedName) + "=" + Redacted
		}
	}
	return s[:q+1] + strings.Join(params, "&")
}

// RedactNATSURLs returns the NATS URL list raw (comma-separated URLs) with
// the passwords and tokens of its userinfos and password parameters
// replaced by Redacted. The userinfo is hidden whole, user included: to
// nats.go a userinfo without ':' is a token, and a token may hold a ':'
// itself.
//
// A password may hold a comma, so the list is not split at every comma:
// a URL starts only where a comma is followed by a scheme and "://", and
// its userinfo runs from there to its last '@'.
func RedactNATSURLs(raw string) string {
	var b strings.Builder
	from := 0
	for _, m := range append(urlStartRE.FindAllStringSubmatchIndex(raw, -1), []int{0, 0, len(raw), len(raw)}) {
		sepStart, sepEnd := m[2], m[3] // the comma and spaces
		b.WriteString(redactEncodedParams(redactUserinfo(raw[from:sepStart], true)))
		b.WriteString(raw[sepStart:sepEnd])
		from = sepEnd
	}
	return passwordParamRE.ReplaceAllString(b.String(), "${1}"+Redacted)
}

// urlStartRE matches the comma (and spaces) before the next URL of a list:
// one followed by a scheme and "://".
var urlStartRE = regexp.MustCompile(`(,\s*)[A-Za-z][A-Za-z0-9+.-]*://`)

// redactUserinfo hides the userinfo of s (see userinfo): whole when
// hideUser, else the text after its first ':', if any.
func redactUserinfo(s string, hideUser bool) string {
	start, end, ok := userinfo(s)
	if !ok {
		return s
	}
	user, _, hasPassword := strings.Cut(s[start:end], ":")
	switch {
	case hideUser || start == 0:
		return s[:start] + Redacted + s[end:]
	case hasPassword:
		return s[:start] + user + ":" + Redacted + s[end:]
	}
	return s
}

// Agrees reports whether a URL parser read the userinfo of raw as its text
// holds it (see Userinfo): the same user and password, percent-decoded, or
// no userinfo at all. When it does not, the parser took part of the
// userinfo for something else (a '#', '?' or '/' in the password, or an
// '@' later in the URL), and what it took would be shown as a host, a
// port, a path or a fragment: such a URL must be refused.
func Agrees(raw string, parsed *url.Userinfo) bool {
	user, password, hasPassword, ok := Userinfo(raw)
	if !ok || parsed == nil {
		return !ok && parsed == nil
	}
	u, err1 := url.PathUnescape(user)
	p, err2 := url.PathUnescape(password)
	gotPassword, gotHas := parsed.Password()
	return err1 == nil && err2 == nil && u == parsed.Username() && hasPassword == gotHas && p == gotPassword
}

// CheckURL parses raw with net/url and checks that the parser read its
// userinfo as its text holds it (Agrees). The error never quotes raw or a
// part of it: it says what is wrong with the redacted URL (redact is
// RedactURL or RedactNATSURLs), as the parser sees it, or that the user
// or password must be percent-encoded.
//
// A userinfo that holds an unencoded '@' is refused too, although net/url
// reads it as written: parsers disagree on where it ends. net/url and
// go-sql-driver/mysql end it at the last '@', libpq and pgx at the first
// (pgconn parseURLSettings: "only a '/' stops the search"), and pgx would
// send the rest of the password to DNS as a host name and print it in its
// error ("lookup xcret3@127.0.0.1: no such host").
func CheckURL(raw string, redact func(string) string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err == nil && Agrees(raw, u.User) {
		if user, password, _, _ := Userinfo(raw); strings.Contains(user+password, "@") {
			return nil, &URLError{Reason: "the user or password holds an unencoded @, which URL parsers read differently " +
				"(libpq and pgx end the user and password at the first @, Go's net/url at the last); percent-encode it as %40"}
		}
		return u, nil
	}
	if _, err := url.Parse(redact(raw)); err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) { // url.Error repeats the URL
			err = uerr.Err
		}
		return nil, &URLError{Reason: err.Error()}
	}
	return nil, &URLError{Reason: "the user or password holds a character that must be percent-encoded " +
		"(such as %23 for #, %2F for /, %3F for ?, %40 for @, %3A for : in a user, %25 for %), " +
		"or an @ follows the host (percent-encode it as %40)"}
}

// URLError is a URL that CheckURL refused. Its text holds no part of the
// URL.
type URLError struct {
	// Reason says what is wrong, about the redacted URL.
	Reason string
}

func (e *URLError) Error() string { return "not a valid URL: " + e.Reason }

// MySQLPasswordParam returns the name of a query parameter of the mysql://
// URL u that names a password ("password", "Password", "db_password", …),
// or "". go-sql-driver/mysql has no such parameter: it sends every
// parameter it does not know to the server as a session variable (SET
// name=value), and the server's error message quotes the value.
func MySQLPasswordParam(u *url.URL) string {
	if u == nil || u.Scheme != "mysql" {
		return ""
	}
	for name := range u.Query() {
		if strings.Contains(strings.ToLower(name), "password") {
			return name
		}
	}
	return ""
}

// MySQLPasswordParamWhy says why MySQLPasswordParam's parameter is refused.
const MySQLPasswordParamWhy = "the MySQL driver would send it to the server as a session variable; " +
	"put the password in the URL's userinfo, percent-encoded (mysql://user:password@host:3306/database)"
