package broker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// TestDeniedSubject pins the server message that deniedSubject reads:
// nats-server's `Permissions Violation for Publish to "<subject>"` (the
// subject quoted with %q, server/client.go pubPermissionViolation), as
// nats.go wraps it for the asynchronous error handler:
// fmt.Errorf("%w: %s", nats.ErrPermissionViolation, text).
func TestDeniedSubject(t *testing.T) {
	violation := func(text string) error { return fmt.Errorf("%w: %s", nats.ErrPermissionViolation, text) }
	for _, c := range []struct {
		err     error
		subject string
	}{
		{violation(`Permissions Violation for Publish to "perm.b.denied"`), "perm.b.denied"},
		{violation(`permissions violation for publish to "a.\"b"`), `a."b`},
		{violation(`Permissions Violation for Publish to 'plain.quotes'`), "plain.quotes"},
		{violation(`Permissions Violation for Subscription to "_INBOX.x"`), ""},
		{errors.New(`Permissions Violation for Publish to "not.wrapped"`), ""},
		{nats.ErrMaxPayload, ""},
	} {
		subject, ok := deniedSubject(c.err)
		require.Equal(t, c.subject != "", ok, "%v", c.err)
		require.Equal(t, c.subject, subject, "%v", c.err)
	}
}

// TestDenialsMatchBySubjectAndTime: a denial is told to the publishes of
// its subject that began before it, and logged once a minute per subject.
func TestDenialsMatchBySubjectAndTime(t *testing.T) {
	d := NewDenials()
	before := time.Now()
	denied, log := d.Record(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "perm.b.x"`))
	require.True(t, denied)
	require.True(t, log)
	_, log = d.Record(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "perm.b.x"`))
	require.False(t, log, "a second denial within a minute is not logged again")

	err := d.Denied("perm.b.x", before)
	require.ErrorIs(t, err, ErrPublishDenied)
	require.ErrorContains(t, err, `Permissions Violation for Publish to "perm.b.x"`)
	require.NoError(t, d.Denied("perm.b.other", before))
	require.NoError(t, d.Denied("perm.b.x", time.Now().Add(time.Second)), "a publish that began after the denial")
	var none *Denials
	require.NoError(t, none.Denied("perm.b.x", before))
}

// TestDeniedSubscription pins the server's `Permissions Violation for
// Subscription to "<subject>"` (server/client.go processSubEx): the
// relay's reply inbox refused is kept for the connection.
func TestDeniedSubscription(t *testing.T) {
	d := NewDenials()
	require.NoError(t, d.Inbox())
	denied, log := d.Record(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Subscription to "_INBOX.abc.*"`))
	require.True(t, denied)
	require.True(t, log)
	_, log = d.Record(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Subscription to "_INBOX.abc.*"`))
	require.False(t, log)
	require.ErrorIs(t, d.Inbox(), ErrInboxDenied)
	require.ErrorContains(t, d.Inbox(), "_INBOX.abc.*")
	require.ErrorIs(t, d.Denied("events.x", time.Now()), ErrInboxDenied, "no PubAck can arrive")
	require.NotErrorIs(t, d.Denied("events.x", time.Now()), ErrPublishDenied)
}
