package watermillforwarder

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// envelope is the JSON document that Watermill's components/forwarder
// Publisher stores as the payload of every message it writes to the
// forwarder topic: the destination topic and the original message
// (watermill v1.5.1, components/forwarder/envelope.go, messageEnvelope,
// written by wrapMessageInEnvelope with encoding/json). Payload is []byte,
// so the JSON carries it as base64. The forwarder package keeps its own
// decoder unexported; this type decodes the same documented wire format.
type envelope struct {
	DestinationTopic string            `json:"destination_topic"`
	UUID             string            `json:"uuid"`
	Payload          []byte            `json:"payload"`
	Metadata         map[string]string `json:"metadata"`
}

// Reasons a message is skipped: acknowledged without being published,
// because no retry can ever publish it.
const (
	ReasonEnvelope = "envelope" // the payload is not a forwarder envelope
	ReasonSubject  = "subject"  // the destination topic is not a NATS subject
	ReasonMetadata = "metadata" // a metadata entry cannot be a NATS header
	ReasonRejected = "rejected" // NATS or JetStream refused it for good (forwarder.Classify: permanent)
)

// SkipError is a message that can never be published. Watermill tables
// have no dead-letter status: the relay logs it, counts it and acks it so
// that it does not hold back the messages after it.
type SkipError struct {
	Reason string // one of the Reason constants
	Err    error
}

func (e *SkipError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *SkipError) Unwrap() error { return e.Err }

// bridgeHeaders are the headers the relay sets on every message; metadata
// entries with these names (in any case) are dropped, the relay's values
// win. Entries named Nats-* (outbox.IsServerHeader) are dropped too: they
// are instructions to the stream (Nats-Rollup purges a subject), which a
// row of the bridge table may not give either.
var bridgeHeaders = []string{outbox.HeaderMsgID, outbox.HeaderIdempotencyKey}

// unwrapped is a message taken out of its envelope, ready to publish.
type unwrapped struct {
	// Subject is the envelope's destination topic.
	Subject string
	// Msg has UUID = the idempotency key, Payload = the original payload,
	// Metadata = the original metadata less the bridge's own headers and
	// Nats-* entries.
	Msg *message.Message
	// EnvelopeUUID is the original message's UUID.
	EnvelopeUUID string
	// KeyFallback reports that msgIDMetadata was set but the metadata had
	// no value for it, so the key is the UUID.
	KeyFallback bool
}

// unwrap decodes the envelope in row's payload (a message read from the
// forwarder topic) and checks that it can be published.
//
// The idempotency key is the metadata value named msgIDMetadata when that
// is set and the value is not empty; otherwise the original message's
// UUID; and when the envelope has no UUID, the UUID of row itself
// (watermill.NewUUID() by the forwarder publisher), which is as stable
// across reads.
//
// Errors are *SkipError: ReasonEnvelope when the payload is not a JSON
// envelope with a destination topic or the UUID holds CR, LF or NUL,
// ReasonSubject when that topic is not
// a NATS subject without wildcards (outbox.CheckSubject), ReasonMetadata
// when a metadata name is not an HTTP token (RFC 9110 section 5.6.2) or a
// value holds CR, LF or NUL, which would inject headers.
func unwrap(row *message.Message, msgIDMetadata string) (*unwrapped, error) {
	var env envelope
	if err := json.Unmarshal(row.Payload, &env); err != nil {
		return nil, &SkipError{Reason: ReasonEnvelope, Err: fmt.Errorf("payload is not a forwarder envelope: %w", err)}
	}
	if env.DestinationTopic == "" {
		return nil, &SkipError{Reason: ReasonEnvelope, Err: fmt.Errorf("forwarder envelope has no destination_topic")}
	}
	if err := outbox.CheckSubject(env.DestinationTopic); err != nil {
		return nil, &SkipError{Reason: ReasonSubject, Err: fmt.Errorf("destination topic is not a NATS subject: %w", err)}
	}
	u := &unwrapped{Subject: env.DestinationTopic, EnvelopeUUID: env.UUID}
	key := env.UUID
	if msgIDMetadata != "" {
		if v := env.Metadata[msgIDMetadata]; v != "" {
			key = v
		} else {
			u.KeyFallback = true
		}
	}
	if key == "" {
		key = row.UUID
	}
	if strings.ContainsAny(key, "\r\n\x00") {
		// It becomes the Outbox-Idempotency-Key header.
		return nil, &SkipError{Reason: ReasonEnvelope, Err: fmt.Errorf("message UUID %q contains CR, LF or NUL", key)}
	}
	u.Msg = message.NewMessage(key, env.Payload)
	for name, value := range env.Metadata {
		if isBridgeHeader(name) || outbox.IsServerHeader(name) {
			continue
		}
		if err := checkHeader(name, value); err != nil {
			return nil, &SkipError{Reason: ReasonMetadata, Err: err}
		}
		u.Msg.Metadata[name] = value
	}
	return u, nil
}

func isBridgeHeader(name string) bool {
	for _, h := range bridgeHeaders {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

func checkHeader(name, value string) error {
	if name == "" {
		return fmt.Errorf("metadata name is empty")
	}
	for i := 0; i < len(name); i++ {
		if !outbox.IsTokenChar(name[i]) {
			return fmt.Errorf("metadata name %q: byte %q is not allowed in a header name (an HTTP token: letters, digits, !#$%%&'*+-.^_`|~)", name, name[i])
		}
	}
	if strings.ContainsAny(value, "\r\n\x00") {
		return fmt.Errorf("metadata %q: value contains CR, LF or NUL", name)
	}
	return nil
}
