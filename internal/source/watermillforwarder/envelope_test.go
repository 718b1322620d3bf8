package watermillforwarder

import (
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// capture is a message.Publisher that keeps what forwarder.Publisher
// hands to the publisher it wraps: the envelopes, as watermill-sql would
// store them.
type capture struct{ msgs []*message.Message }

func (c *capture) Publish(_ string, msgs ...*message.Message) error {
	c.msgs = append(c.msgs, msgs...)
	return nil
}
func (c *capture) Close() error { return nil }

// wrap returns the row watermill-sql would store for msg published to
// dest through Watermill's own forwarder.Publisher.
func wrap(t testing.TB, dest string, msg *message.Message) *message.Message {
	t.Helper()
	c := &capture{}
	require.NoError(t, forwarder.NewPublisher(c, forwarder.PublisherConfig{}).Publish(dest, msg))
	require.Len(t, c.msgs, 1)
	return c.msgs[0]
}

func TestUnwrapReadsWhatForwarderPublisherWrites(t *testing.T) {
	t.Parallel()
	orig := message.NewMessage("0b0f6a1e-1111-4c1e-9a57-8d0e1c2b3a4d", []byte("nul\x00and \xff bytes"))
	orig.Metadata.Set("name", "OrderCreated")
	orig.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	row := wrap(t, "events.order.created", orig)

	u, err := unwrap(row, "")
	require.NoError(t, err)
	require.Equal(t, "events.order.created", u.Subject)
	require.Equal(t, orig.UUID, u.Msg.UUID, "the key is the original message's UUID")
	require.Equal(t, orig.UUID, u.EnvelopeUUID)
	require.Equal(t, []byte(orig.Payload), []byte(u.Msg.Payload))
	require.Equal(t, orig.Metadata, u.Msg.Metadata)
	require.False(t, u.KeyFallback)

	m, err := Marshaler{Namespace: "svc"}.Marshal(u.Subject, u.Msg)
	require.NoError(t, err)
	require.Equal(t, "events.order.created", m.Subject)
	require.Equal(t, []byte(orig.Payload), m.Data)
	require.Equal(t, "svc/"+orig.UUID, m.Header.Get(outbox.HeaderMsgID))
	require.Equal(t, orig.UUID, m.Header.Get(outbox.HeaderIdempotencyKey))
	require.Equal(t, "OrderCreated", m.Header.Get("name"))
	require.Equal(t, orig.Metadata.Get("traceparent"), m.Header.Get("traceparent"))
	require.Len(t, m.Header, 4)
}

func TestUnwrapIdempotencyKey(t *testing.T) {
	t.Parallel()
	withKey := message.NewMessage("uuid-1", nil)
	withKey.Metadata.Set("key", "order-1")
	withEmptyKey := message.NewMessage("uuid-2", nil)
	withEmptyKey.Metadata.Set("key", "")
	noUUID := message.NewMessage("", nil)
	rowNoUUID := wrap(t, "events.x", noUUID)

	for _, tc := range []struct {
		name          string
		row           *message.Message
		metadata      string
		key           string
		fallback      bool
		forbiddenKeys []string
	}{
		{name: "uuid", row: wrap(t, "events.x", withKey), key: "uuid-1"},
		{name: "metadata", row: wrap(t, "events.x", withKey), metadata: "key", key: "order-1"},
		{name: "metadata missing", row: wrap(t, "events.x", message.NewMessage("uuid-3", nil)), metadata: "key", key: "uuid-3", fallback: true},
		{name: "metadata empty", row: wrap(t, "events.x", withEmptyKey), metadata: "key", key: "uuid-2", fallback: true},
		{name: "no uuid: the row's", row: rowNoUUID, key: rowNoUUID.UUID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := unwrap(tc.row, tc.metadata)
			require.NoError(t, err)
			require.Equal(t, tc.key, u.Msg.UUID)
			require.Equal(t, tc.fallback, u.KeyFallback)
		})
	}
}

func TestUnwrapDropsTheRelaysHeadersFromMetadata(t *testing.T) {
	t.Parallel()
	orig := message.NewMessage("uuid-1", nil)
	orig.Metadata.Set("NATS-MSG-ID", "forged")
	orig.Metadata.Set("Outbox-Idempotency-Key", "forged")
	orig.Metadata.Set("Nats-Expected-Stream", "EVENTS")
	orig.Metadata.Set("nats-rollup", "sub")
	orig.Metadata.Set("X-Tenant", "t1")
	u, err := unwrap(wrap(t, "events.x", orig), "")
	require.NoError(t, err)
	require.Equal(t, message.Metadata{"X-Tenant": "t1"}, u.Msg.Metadata, "the relay's headers and Nats-* instructions are dropped, the rest kept")
}

func TestUnwrapRefusesWhatCanNeverBePublished(t *testing.T) {
	t.Parallel()
	badName := message.NewMessage("u", nil)
	badName.Metadata.Set("has space", "x")
	badValue := message.NewMessage("u", nil)
	badValue.Metadata.Set("X", "a\nb")
	nulValue := message.NewMessage("u", nil)
	nulValue.Metadata.Set("X", "a\x00b")
	for _, tc := range []struct {
		name, reason string
		row          *message.Message
	}{
		{"not json", ReasonEnvelope, message.NewMessage("r", []byte("not json"))},
		{"json string", ReasonEnvelope, message.NewMessage("r", []byte(`"x"`))},
		{"no destination", ReasonEnvelope, message.NewMessage("r", []byte(`{"uuid":"u","payload":null}`))},
		{"payload not base64", ReasonEnvelope, message.NewMessage("r", []byte(`{"destination_topic":"events.x","payload":"%%%"}`))},
		{"metadata not strings", ReasonEnvelope, message.NewMessage("r", []byte(`{"destination_topic":"events.x","metadata":{"a":1}}`))},
		{"wildcard", ReasonSubject, wrap(t, "events.>", message.NewMessage("u", nil))},
		{"space", ReasonSubject, wrap(t, "events.a b", message.NewMessage("u", nil))},
		{"empty token", ReasonSubject, wrap(t, "events..x", message.NewMessage("u", nil))},
		// A publish line over the server's max_control_line closes the
		// connection for good: the subject is refused before it is sent.
		{"too long for NATS", ReasonSubject, wrap(t, "events."+strings.Repeat("x", 5000), message.NewMessage("u", nil))},
		{"header name", ReasonMetadata, wrap(t, "events.x", badName)},
		{"header value CRLF", ReasonMetadata, wrap(t, "events.x", badValue)},
		{"header value NUL", ReasonMetadata, wrap(t, "events.x", nulValue)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := unwrap(tc.row, "")
			var se *SkipError
			require.True(t, errors.As(err, &se), "error %v", err)
			require.Equal(t, tc.reason, se.Reason, se.Error())
		})
	}
}

// FuzzUnwrap feeds arbitrary rows to the decoder: it never panics, and what
// it accepts marshals to a NATS message with one Nats-Msg-Id and a
// subject without wildcards.
func FuzzUnwrap(f *testing.F) {
	for _, seed := range []string{
		`{"destination_topic":"events.x","uuid":"u","payload":"aGVsbG8=","metadata":{"a":"b"}}`,
		`{"destination_topic":"events.x","uuid":"","payload":null,"metadata":null}`,
		`{"destination_topic":"events.*"}`,
		`{"destination_topic":"events.x","metadata":{"Nats-Msg-Id":"x","k":"v\r\n"}}`,
		`not json`,
		``,
	} {
		f.Add([]byte(seed), "")
		f.Add([]byte(seed), "k")
	}
	f.Fuzz(func(t *testing.T, payload []byte, metadata string) {
		u, err := unwrap(message.NewMessage("row-uuid", payload), metadata)
		if err != nil {
			var se *SkipError
			require.True(t, errors.As(err, &se))
			return
		}
		require.NoError(t, outbox.CheckSubject(u.Subject))
		require.NotEmpty(t, u.Msg.UUID)
		m, err := Marshaler{}.Marshal(u.Subject, u.Msg)
		require.NoError(t, err)
		require.Len(t, m.Header.Values(outbox.HeaderMsgID), 1)
		for name, values := range m.Header {
			require.NoError(t, checkHeader(name, values[0]))
		}
	})
}
