package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/textproto"
	"strings"
	"unicode/utf8"
)

// Header names the relay sets on every message. A row's headers may not set
// them (case-insensitively): a row that tries is a dead letter, so a row can
// never change its own Nats-Msg-Id.
const (
	HeaderMsgID          = "Nats-Msg-Id"
	HeaderID             = "Outbox-Id"
	HeaderIdempotencyKey = "Outbox-Idempotency-Key"
	HeaderCreatedAt      = "Outbox-Created-At"
	HeaderAttempt        = "Outbox-Attempt"
)

var reservedHeaders = []string{HeaderMsgID, HeaderID, HeaderIdempotencyKey, HeaderCreatedAt, HeaderAttempt}

// ServerHeaderPrefix begins the header names JetStream reads as
// instructions rather than data (nats-server server/stream.go:
// Nats-Rollup purges a subject or the stream, Nats-TTL sets the message's
// lifetime, Nats-Expected-* make the store conditional, Nats-Msg-Id is the
// dedup id). A row may set none of them, in any case: the relay sets
// Nats-Msg-Id, and the others would let a row change the stream.
const ServerHeaderPrefix = "Nats-"

// ParseHeaders decodes the headers column: a JSON object whose values are
// strings or arrays of strings. It returns the headers in NATS form (a name
// maps to its values, in order; names kept as written).
//
// It fails when the JSON is not such an object, when a name is not an HTTP
// token (RFC 9110 section 5.6.2), when a value holds CR, LF or NUL (they
// would inject headers), when a name is one the relay sets, or when a name
// begins with Nats- (ServerHeaderPrefix, in any case). An empty column and
// "null" mean no headers.
func ParseHeaders(raw []byte) (map[string][]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "{}" { // the column default, most rows
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("headers must be a JSON object of string or string-array values: %w", err)
	}
	if len(obj) == 0 {
		return nil, nil
	}
	out := make(map[string][]string, len(obj))
	for name, value := range obj {
		if err := checkHeaderName(name); err != nil {
			return nil, err
		}
		values, err := headerValues(name, value)
		if err != nil {
			return nil, err
		}
		out[name] = values
	}
	return out, nil
}

func checkHeaderName(name string) error {
	if name == "" {
		return fmt.Errorf("header name is empty")
	}
	for i := 0; i < len(name); i++ {
		if !IsTokenChar(name[i]) {
			return fmt.Errorf("header name %q: byte %q is not allowed; names are HTTP tokens (letters, digits, !#$%%&'*+-.^_`|~)", name, name[i])
		}
	}
	for _, reserved := range reservedHeaders {
		if strings.EqualFold(name, reserved) {
			return fmt.Errorf("header %q is set by the relay and may not be set by a row", name)
		}
	}
	if IsServerHeader(name) {
		return fmt.Errorf("header %q is reserved for the JetStream server: Nats-* headers are instructions to the stream (rollup, TTL, expected stream or sequence), so a row may not set them", name)
	}
	return nil
}

func headerValues(name string, raw json.RawMessage) ([]string, error) {
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, checkHeaderValue(name, one)
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("header %q: value %s is neither a string nor an array of strings", name, truncate(string(raw), 64))
	}
	for _, v := range many {
		if err := checkHeaderValue(name, v); err != nil {
			return nil, err
		}
	}
	return many, nil
}

func checkHeaderValue(name, v string) error {
	if strings.ContainsAny(v, "\r\n\x00") {
		return fmt.Errorf("header %q: value contains CR, LF or NUL", name)
	}
	return nil
}

// IsServerHeader reports whether name begins with ServerHeaderPrefix, in
// any case.
func IsServerHeader(name string) bool {
	return len(name) >= len(ServerHeaderPrefix) && strings.EqualFold(name[:len(ServerHeaderPrefix)], ServerHeaderPrefix)
}

// IsTokenChar reports whether c may appear in an HTTP token (RFC 9110
// section 5.6.2), the rule for header names.
func IsTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// truncate cuts s to at most n bytes, at a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// messageHeaderBytes is the size of headers h in a NATS message as the NATS
// client counts it against the server's max_payload (nats.go
// Msg.headerSize): "NATS/1.0\r\n" and a last "\r\n", and for each value its
// name, ": ", the value without leading and trailing white space, and
// "\r\n". It is 0 without headers.
func messageHeaderBytes(h map[string][]string) int64 {
	if len(h) == 0 {
		return 0
	}
	n := int64(len("NATS/1.0\r\n") + len("\r\n"))
	for name, values := range h {
		for _, v := range values {
			n += int64(len(name) + len(": ") + len(textproto.TrimString(v)) + len("\r\n"))
		}
	}
	return n
}

// RelayHeaderMinBytes is the least that the headers of a row's message
// count against max_payload: those the relay sets (RelayHeaders), each as
// short as it can be. A payload longer than max_payload less this can
// never be published.
var RelayHeaderMinBytes = messageHeaderBytes(map[string][]string{
	HeaderMsgID:          {"x"},                    // MsgID is never empty
	HeaderID:             {"1"},                    // one digit
	HeaderIdempotencyKey: {""},                     // trimmed to nothing
	HeaderCreatedAt:      {"2006-01-02T15:04:05Z"}, // RFC 3339 in UTC, no fraction
	HeaderAttempt:        {"1"},
})

// PayloadMaxBytes is the longest payload a row's message can carry through a
// NATS server whose max_payload is maxPayload bytes: maxPayload less the
// smallest headers the relay sets (at least 1). A longer payload can never
// be published. 0 when maxPayload is unknown (0 or less).
func PayloadMaxBytes(maxPayload int64) int64 {
	if maxPayload <= 0 {
		return 0
	}
	return max(maxPayload-RelayHeaderMinBytes, 1)
}

// OverMaxPayload is why a row whose payload of size bytes is longer than
// PayloadMaxBytes(maxPayload) is a dead letter: the sources settle it from
// its length, without publishing it.
func OverMaxPayload(size, maxPayload int64) error {
	return fmt.Errorf("payload of %d bytes is over the NATS server's max_payload of %d bytes, with the message's headers; "+
		"dead-lettered from its length", size, maxPayload)
}

// MinMessageHeaderBytes is the least that the headers of the message of a
// row with idempotency key key and headers h count against max_payload, as
// the NATS client counts them (see messageHeaderBytes): h, Nats-Msg-Id
// without a namespace, the key, and the other relay headers as short as
// they can be.
func MinMessageHeaderBytes(key string, h map[string][]string) int64 {
	all := make(map[string][]string, len(h)+len(reservedHeaders))
	for name, values := range h {
		all[name] = values
	}
	all[HeaderMsgID] = []string{MsgID("", key)}
	all[HeaderID] = []string{"1"}
	all[HeaderIdempotencyKey] = []string{key}
	all[HeaderCreatedAt] = []string{"2006-01-02T15:04:05Z"}
	all[HeaderAttempt] = []string{"1"}
	return messageHeaderBytes(all)
}

// RelayHeaders are the headers the relay sets on every message, in this
// order: Nats-Msg-Id, Outbox-Id, Outbox-Idempotency-Key, Outbox-Created-At
// (RFC 3339, UTC), Outbox-Attempt.
var RelayHeaders = reservedHeaders
