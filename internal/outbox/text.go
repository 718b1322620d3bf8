package outbox

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxErrorLen is the longest last_error stored, in bytes (2 KiB).
const MaxErrorLen = 2048

// SanitizeError makes any error text storable in a text column: NUL bytes
// become `\x00`, bytes that are not valid UTF-8 become `\xNN`, and text
// longer than MaxErrorLen bytes is cut at a rune boundary and ends in "…".
// PostgreSQL refuses NUL in text and invalid UTF-8 in a UTF-8 database; a
// failure path that cannot store its own error would loop forever.
func SanitizeError(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == 0:
			b.WriteString(`\x00`)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
		if b.Len() > MaxErrorLen {
			break
		}
	}
	out := b.String()
	if len(out) <= MaxErrorLen {
		return out
	}
	cut := MaxErrorLen - len("…")
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return out[:cut] + "…"
}

// SubjectMaxBytes is the longest subject the relay publishes, in bytes.
//
// A NATS server closes a client's connection when one protocol line is
// longer than its max_control_line (4,096 bytes by default: nats-server
// server/const.go MAX_CONTROL_LINE_SIZE, checked by the parser's
// overMaxControlLineLimit), and nats.go does not reconnect after that
// error: every publish of the process stops. The line of a JetStream
// publish carries the subject, the reply subject (_INBOX., a 6-byte token
// and a per-message token: nats.go jetstream/publish.go) and two sizes;
// 4,000 bytes of subject leave 96 bytes for them. A server configured with
// a smaller max_control_line needs subjects shorter by the difference.
const SubjectMaxBytes = 4000

// CheckSubject reports whether subject can be published to: non-empty, at
// most SubjectMaxBytes, dot-separated tokens that are not empty, no
// whitespace or control bytes, no wildcards ("*" or ">" tokens), and not a
// subject the NATS system reserves (see ReservedSubject).
func CheckSubject(subject string) error {
	if reason := ReservedSubject(subject); reason != "" {
		return fmt.Errorf("subject %.80q is reserved: %s; an outbox row names an application subject such as events.order.created", subject, reason)
	}
	if subject == "" {
		return fmt.Errorf("subject is empty")
	}
	if len(subject) > SubjectMaxBytes {
		return fmt.Errorf("subject %.40q… is %d bytes; the relay publishes subjects of at most %d bytes: a longer publish line makes the NATS server close the connection (max_control_line, 4096 bytes by default)", subject, len(subject), SubjectMaxBytes)
	}
	for i := 0; i < len(subject); i++ {
		if c := subject[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("subject %q contains whitespace or a control byte; subjects are dot-separated tokens such as events.order.created", subject)
		}
	}
	for _, token := range strings.Split(subject, ".") {
		switch token {
		case "":
			return fmt.Errorf("subject %q has an empty token; subjects are dot-separated tokens such as events.order.created", subject)
		case "*", ">":
			return fmt.Errorf("subject %q contains the wildcard %q; an outbox row names one concrete subject", subject, token)
		}
	}
	return nil
}

// ReservedSubject says why subject is one the relay must never publish to,
// or "" when it is not. A publish is a request to whatever listens on its
// subject, and the relay's NATS user is usually allowed the JetStream API:
// one row to $JS.API.STREAM.DELETE.EVENTS would delete a stream.
//
//   - "$"-prefixed first tokens are the system's: the JetStream API
//     ($JS.API.), acks and flow control ($JS.ACK., $JS.FC.), advisories
//     ($JS.EVENT.), the system account ($SYS.), the object store ($O., whose
//     chunks and metadata one row cannot write consistently), clustering,
//     MQTT and service discovery ($NRG., $JSC., $MQTT., $SRV., …). The one
//     exception is $KV.<bucket>.<key>: a put into a key-value bucket is an
//     ordinary JetStream publish to the bucket's stream, deduplicated like any
//     other, and a legitimate thing for an outbox to write.
//   - _INBOX. is where replies go (the relay's own PubAcks among them): a row
//     there would answer somebody else's request.
func ReservedSubject(subject string) string {
	first, _, _ := strings.Cut(subject, ".")
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

// Count is n with noun in the plural form n takes: "1 row", "2 rows". For
// the counts commands and the console print.
func Count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
