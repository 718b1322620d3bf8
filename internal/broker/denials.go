package broker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrPublishDenied is wrapped by the errors of Denials.Denied: the NATS
// server refused a publish for want of permission.
var ErrPublishDenied = errors.New("NATS refused the publish: the relay's NATS user has no permission to publish to the subject")

// ErrInboxDenied is wrapped by the error of Denials.Inbox: the NATS server
// refused the relay's subscription to its reply inbox, so no PubAck (and
// no answer of the JetStream API) can reach it.
var ErrInboxDenied = errors.New("NATS refused the relay's subscription to its reply inbox: the relay's NATS user has no permission to subscribe to _INBOX.>, so no PubAck can arrive")

// denialLogInterval spaces the log lines about denials of one subject.
const denialLogInterval = time.Minute

// Denials records the publish permission violations the NATS server
// reports on a connection, so that the rows of a denied subject learn why.
//
// A publish the server's permissions refuse returns nothing to the
// publisher: the server sends `-ERR 'Permissions Violation for Publish to
// "X"'` (nats-server server/client.go pubPermissionViolation), which
// nats.go delivers to the asynchronous error handler only, and the
// JetStream publish then times out waiting for a PubAck that never comes.
// Denials matches those two by subject and time. Safe for concurrent use.
//
// A subscription the server refuses is reported the same way (`Permissions
// Violation for Subscription to "X"`): the relay subscribes only to its
// reply inbox (_INBOX.…, for PubAcks and API answers), and without it
// nothing it publishes can be confirmed. Denials keeps that too, for the
// life of the connection (nats.go does not subscribe again).
type Denials struct {
	mu    sync.Mutex
	m     map[string]*denial
	inbox error // the server's refusal of a subscription, nil when none
}

type denial struct {
	at, logged time.Time
	text       string
}

// NewDenials returns an empty record.
func NewDenials() *Denials { return &Denials{m: map[string]*denial{}} }

// Record takes an error of the connection's asynchronous error handler.
// It reports whether err is a publish permission violation, and whether it
// is the first for its subject within a minute (worth a log line).
func (d *Denials) Record(err error) (denied, log bool) {
	if subject, ok := deniedSubscription(err); ok {
		if d == nil {
			return true, true
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		first := d.inbox == nil
		d.inbox = fmt.Errorf("%w (server: %s; subject %s); grant the user subscribe permission on _INBOX.> and restart the relay", ErrInboxDenied, err.Error(), subject)
		return true, first
	}
	subject, ok := deniedSubject(err)
	if !ok || d == nil {
		return ok, ok
	}
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.m[subject]
	if v == nil {
		if len(d.m) >= 10000 { // bounded: a relay denied on that many subjects starts its record over
			clear(d.m)
		}
		v = &denial{}
		d.m[subject] = v
	}
	v.at, v.text = now, err.Error()
	if now.Sub(v.logged) >= denialLogInterval {
		v.logged = now
		return true, true
	}
	return true, false
}

// Denied returns an error wrapping ErrPublishDenied when the server
// reported a permission violation for a publish to subject at or after
// since (the moment the caller's publish began); Inbox's error when the
// server refused the relay's reply inbox; nil otherwise.
func (d *Denials) Denied(subject string, since time.Time) error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	v, inbox := d.m[subject], d.inbox
	d.mu.Unlock()
	if inbox != nil {
		// No PubAck could have arrived, whatever the subject.
		return inbox
	}
	if v == nil || v.at.Before(since) {
		return nil
	}
	return fmt.Errorf("%w %s (server: %s); grant the permission (the user's publish allow list), or fix the row's subject, then bridge retry", ErrPublishDenied, subject, v.text)
}

// Inbox returns an error wrapping ErrInboxDenied when the server refused
// a subscription on the connection; nil otherwise.
func (d *Denials) Inbox() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inbox
}

// deniedSubscription returns the subject of a subscription permission
// violation, as nats.go passes it to the asynchronous error handler
// (`Permissions Violation for Subscription to "<subject>"`, nats-server
// server/client.go processSubEx); see deniedSubject.
func deniedSubscription(err error) (string, bool) {
	return violationSubject(err, "Permissions Violation for Subscription to ")
}

// deniedSubject returns the subject of a publish permission violation as
// nats.go passes it to the asynchronous error handler: an error wrapping
// nats.ErrPermissionViolation whose text ends with the server's
// `Permissions Violation for Publish to "<subject>"`, the subject quoted
// by Go's %q (nats-server server/client.go pubPermissionViolation). This
// is the one place that reads the server's text: nats.go offers no typed
// field for the subject.
func deniedSubject(err error) (string, bool) {
	return violationSubject(err, "Permissions Violation for Publish to ")
}

// violationSubject reads the subject after marker in a permission
// violation: the one place that reads the server's text.
func violationSubject(err error, marker string) (string, bool) {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	text := err.Error()
	i := strings.Index(strings.ToLower(text), strings.ToLower(marker))
	if i < 0 {
		return "", false
	}
	quoted := strings.TrimSpace(text[i+len(marker):])
	subject, uerr := strconv.Unquote(quoted)
	if uerr != nil {
		// Not a Go-quoted string: older servers wrote it in plain quotes.
		subject = strings.Trim(quoted, `"'`)
	}
	if subject == "" {
		return "", false
	}
	return subject, true
}
