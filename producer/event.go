package producer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/textproto"
	"strings"
	"unicode/utf8"
)

// Event is one message to publish: one outbox row.
type Event struct {
	// Subject is the NATS subject the message is published to: dot-separated
	// tokens such as "events.order.created", with no whitespace, no empty
	// token and no wildcard token ("*", ">"). Required.
	Subject string
	// Payload is the message body, stored in the payload column and relayed
	// byte for byte. Nil is an empty body.
	Payload []byte
	// Headers are copied to the NATS message. Names are HTTP tokens;
	// values hold no CR, LF or NUL. Nats-Msg-Id and Outbox-* are set by the
	// relay, and the other Nats-* names are instructions to the JetStream
	// server (Nats-Rollup, Nats-TTL, Nats-Expected-Stream, …): none of them
	// may be set here, in any case. A name with no values is left out.
	Headers Header
	// OrderingKey groups events that must be published in order, usually the
	// id of the aggregate they belong to ("order-42"). Events of one key are
	// published in row id order, one at a time; write them one transaction
	// after another. Empty: no order.
	OrderingKey string
	// IdempotencyKey identifies one logical operation; the relay derives the
	// message's Nats-Msg-Id from it, and a second row with the same key is
	// not written (Result.AlreadyEnqueued). It may not hold ASCII control
	// characters (CR, LF, tab, …): it is also sent in the
	// Outbox-Idempotency-Key header, which cannot carry them (leading and
	// trailing spaces are dropped from that header too, though not from the
	// key or its Nats-Msg-Id). Make it deterministic from the
	// business operation ("order-42-created"), never a fresh value per
	// retry. Empty: a new UUIDv7, which only deduplicates the relay's own
	// repeats.
	IdempotencyKey string
}

// Header is a message's headers: a name maps to its values, in order, as
// in nats.Header and http.Header. Names are kept as written (not
// canonicalized). A map[string][]string literal is a Header.
type Header map[string][]string

// Result is what Write did with one event, in the order of the events.
type Result struct {
	// ID is the new row's id (the relay's order within an ordering key);
	// 0 when AlreadyEnqueued.
	ID int64
	// IdempotencyKey is the key the row was written with: the event's, or
	// the UUIDv7 generated for an event without one.
	IdempotencyKey string
	// AlreadyEnqueued is true when the table already held a row with this
	// idempotency key, written earlier by this transaction or by a committed
	// one, so nothing was written for this event. It is not an error: the
	// event is (or was) relayed once, from the earlier row. A row counts only
	// while it is in the table; the relay deletes relayed rows after its
	// relay.retention (24h by default).
	AlreadyEnqueued bool
}

// ErrInvalidEvent is matched by errors.Is for every *InvalidEventError.
var ErrInvalidEvent = errors.New("invalid outbox event")

// InvalidEventError is an event Write refused before writing anything.
type InvalidEventError struct {
	// Index is the event's position among Write's events, from 0.
	Index int
	// Field is the Event field at fault: "Subject", "Headers",
	// "IdempotencyKey", "OrderingKey" or "Payload".
	Field string
	// Reason names the value and what would be accepted.
	Reason string
}

func (e *InvalidEventError) Error() string {
	return fmt.Sprintf("outbox event %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidEvent) true.
func (e *InvalidEventError) Is(target error) bool { return target == ErrInvalidEvent }

// reservedHeaderPrefix begins the headers the relay sets on every message
// (Outbox-Id, Outbox-Idempotency-Key, Outbox-Created-At, Outbox-Attempt).
const reservedHeaderPrefix = "Outbox-"

// headerMsgID is JetStream's deduplication header, set by the relay from
// the idempotency key.
const headerMsgID = "Nats-Msg-Id"

// serverHeaderPrefix begins the headers JetStream reads as instructions
// (nats-server server/stream.go: Nats-Rollup purges messages, Nats-TTL
// sets a lifetime, Nats-Expected-* make the store conditional). The relay
// dead-letters a row that sets one.
const serverHeaderPrefix = "Nats-"

// check validates e for a table with limits lim. It mirrors the checks the
// relay makes when it reads the row (a row that fails them is a dead
// letter), and adds what a database would refuse or alter: NUL bytes and
// invalid UTF-8 in text, keys too long for the column.
func check(e *Event, lim limits) (field, reason string) {
	if reason := checkSubject(e.Subject, lim.subject); reason != "" {
		return "Subject", reason
	}
	if e.IdempotencyKey != "" {
		if reason := checkKey(e.IdempotencyKey, lim.key); reason != "" {
			return "IdempotencyKey", reason
		}
		if i := strings.IndexFunc(e.IdempotencyKey, isControl); i >= 0 {
			return "IdempotencyKey", fmt.Sprintf("%q contains the control character %q; the key travels in the Outbox-Idempotency-Key header, which cannot hold CR, LF, tab or other ASCII control characters", e.IdempotencyKey, e.IdempotencyKey[i])
		}
	}
	if e.OrderingKey != "" {
		if reason := checkKey(e.OrderingKey, lim.orderingKey); reason != "" {
			return "OrderingKey", reason
		}
	}
	for name, values := range e.Headers {
		if reason := checkHeader(name, values); reason != "" {
			return "Headers", reason
		}
	}
	if lim.maxPayload > 0 {
		headers := minHeaderBytes(e)
		if int64(len(e.Payload))+headers > lim.maxPayload {
			return "Payload", fmt.Sprintf("%d bytes, with the headers of its message (at least %d bytes), are over the NATS server's max_payload of %d bytes (Config.MaxPayload); the relay would make the row a dead letter",
				len(e.Payload), headers, lim.maxPayload)
		}
	}
	return "", ""
}

// The relay's Nats-Msg-Id is the idempotency key itself when it is 1 to
// msgIDPlainMax bytes of visible ASCII and does not begin with
// msgIDHashPrefix, else msgIDHashPrefix and the key's SHA-256 in hex
// (msgIDHashedLen bytes), prefixed by the relay's dedup.namespace and '/'.
const (
	msgIDPlainMax   = 128
	msgIDHashPrefix = "sha256:"
	msgIDHashedLen  = len(msgIDHashPrefix) + 64
)

// minHeaderBytes is the least that the headers of e's message count
// against max_payload, as the NATS client counts them (nats.go
// Msg.headerSize: "NATS/1.0\r\n", a line "Name: value\r\n" per value,
// trimmed, and "\r\n"): e's headers, and those the relay adds as short
// as they can be: Nats-Msg-Id without a namespace, Outbox-Id of one
// digit, Outbox-Idempotency-Key, Outbox-Created-At of 20 bytes and
// Outbox-Attempt of one. An event without a key gets a UUIDv7 (36 bytes).
func minHeaderBytes(e *Event) int64 {
	key := e.IdempotencyKey
	if key == "" {
		key = "00000000-0000-7000-8000-000000000000"
	}
	msgID := msgIDHashedLen
	if len(key) <= msgIDPlainMax && !strings.HasPrefix(key, msgIDHashPrefix) && !strings.ContainsFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		msgID = len(key)
	}
	line := func(name string, valueLen int) int64 { return int64(len(name) + len(": ") + valueLen + len("\r\n")) }
	n := int64(len("NATS/1.0\r\n") + len("\r\n"))
	n += line(headerMsgID, msgID) + line("Outbox-Id", 1) + line("Outbox-Idempotency-Key", len(textproto.TrimString(key))) +
		line("Outbox-Created-At", len("2006-01-02T15:04:05Z")) + line("Outbox-Attempt", 1)
	for name, values := range e.Headers {
		for _, v := range values {
			n += line(name, len(textproto.TrimString(v)))
		}
	}
	return n
}

func checkSubject(s string, max int) string {
	const form = "subjects are dot-separated tokens such as events.order.created"
	if s == "" {
		return "is empty; " + form
	}
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%q is not valid UTF-8", s)
	}
	if max > 0 && len(s) > max {
		return fmt.Sprintf("%.40q… is %d bytes; this table holds subjects of at most %d bytes", s, len(s), max)
	}
	if len(s) > subjectMax {
		return fmt.Sprintf("%.40q… is %d bytes; the relay publishes subjects of at most %d bytes: a longer publish line makes the NATS server close the connection (max_control_line, 4096 bytes by default)", s, len(s), subjectMax)
	}
	if reason := reservedSubject(s); reason != "" {
		return fmt.Sprintf("%.80q is reserved: %s; %s", s, reason, form)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return fmt.Sprintf("%q contains whitespace or a control byte; %s", s, form)
		}
	}
	for _, token := range strings.Split(s, ".") {
		switch token {
		case "":
			return fmt.Sprintf("%q has an empty token; %s", s, form)
		case "*", ">":
			return fmt.Sprintf("%q contains the wildcard %q; an event names one concrete subject", s, token)
		}
	}
	return ""
}

// reservedSubject says why the relay refuses to publish to s, or "" (the
// relay's outbox.ReservedSubject, checked equal in a test): a subject whose
// first token begins with "$" belongs to the NATS system — one row to
// $JS.API.STREAM.DELETE.EVENTS would delete a stream — except
// $KV.<bucket>.<key>, a put into a key-value bucket; _INBOX. subjects are
// reply inboxes.
func reservedSubject(s string) string {
	first, _, _ := strings.Cut(s, ".")
	switch {
	case first == "$KV":
		return ""
	case strings.HasPrefix(first, "$"):
		return "subjects that begin with $ belong to the NATS system (JetStream API, acks, advisories, system account, object store); only $KV.<bucket>.<key> is accepted"
	case first == "_INBOX":
		return "_INBOX. subjects are reply inboxes"
	}
	return ""
}

// subjectMax is the longest subject the relay publishes, in bytes (the
// relay's outbox.SubjectMaxBytes, checked equal in a test): a NATS server
// closes the connection of a client whose protocol line exceeds its
// max_control_line (4,096 bytes by default), and the publish line carries
// the subject, a reply subject and two sizes besides.
const subjectMax = 4000

// keyMax is the longest key of any table: the relay's limit
// (outbox.KeyMaxBytes, checked equal in a test). The idempotency key sits
// in a unique index and travels in the Outbox-Idempotency-Key header.
const keyMax = 1024

// isControl reports an ASCII control character. An idempotency key may
// not hold one: nats.go writes header values with CR and LF replaced by
// spaces (and leading and trailing spaces and tabs trimmed), so the
// Outbox-Idempotency-Key header would not hold the key.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func checkKey(k string, max int) string {
	if !utf8.ValidString(k) {
		return fmt.Sprintf("%q is not valid UTF-8", k)
	}
	if strings.IndexByte(k, 0) >= 0 {
		return fmt.Sprintf("%q contains a NUL byte", k)
	}
	if max == 0 {
		max = keyMax
	}
	if len(k) > max {
		return fmt.Sprintf("%.40q… is %d bytes; this table holds keys of at most %d bytes", k, len(k), max)
	}
	return ""
}

func checkHeader(name string, values []string) string {
	if name == "" {
		return "a header name is empty"
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Sprintf("header name %q: byte %q is not allowed; names are HTTP tokens (letters, digits, !#$%%&'*+-.^_`|~)", name, name[i])
		}
	}
	if strings.EqualFold(name, headerMsgID) || hasPrefixFold(name, reservedHeaderPrefix) {
		return fmt.Sprintf("header %q is set by the relay (Nats-Msg-Id from the idempotency key, Outbox-* from the row); an event may not set it", name)
	}
	if hasPrefixFold(name, serverHeaderPrefix) {
		return fmt.Sprintf("header %q is reserved for the JetStream server: Nats-* headers are instructions to the stream (rollup, TTL, expected stream or sequence); an event may not set it", name)
	}
	for _, v := range values {
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Sprintf("header %q: value %q contains CR, LF or NUL", name, v)
		}
		if !utf8.ValidString(v) {
			return fmt.Sprintf("header %q: value %q is not valid UTF-8", name, v)
		}
	}
	return ""
}

// hasPrefixFold reports whether s begins with prefix, in any case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110
// section 5.6.2), the rule the relay applies to header names.
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// headersJSON encodes h for the headers column: a JSON object mapping a
// name to its value (one value) or to an array of its values (several).
// Names without values are left out; no headers is {}.
func headersJSON(h Header) (string, error) {
	obj := make(map[string]any, len(h))
	for name, values := range h {
		switch len(values) {
		case 0:
		case 1:
			obj[name] = values[0]
		default:
			obj[name] = values
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}
