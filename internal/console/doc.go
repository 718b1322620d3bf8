// Package console is the web console `bridge run` serves at /ui/ when
// ui.enabled is set: the outbox at a glance (rows by status, lag, what
// /readyz answers), failed rows and dead letters grouped by error and
// subject, one row whole (headers, a payload preview capped at
// PreviewBytesDefault bytes, binary shown as hex), and the actions retry
// (a selection of failed rows and dead letters), requeue (leases older than
// relay.inflight_timeout) and purge (done rows older than an age).
//
// Pages are server-side rendered Go templates embedded in the binary: no
// build step, no CDN, no JavaScript needed. Actions need ui.token (a bearer
// token, or a sign-in form that sets an HttpOnly, SameSite=Strict cookie;
// form posts carry a CSRF token) and each one is logged at INFO. Its reads
// are bounded (outbox.ListRowsMax, a LIMIT on every statement) and take no
// row lock, so the console does not slow the relay.
package console
