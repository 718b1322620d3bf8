package producerrelay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/producer"
)

func TestWriteRefusesInvalidEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	ok := producer.Event{Subject: "events.ok", IdempotencyKey: "fine"}
	for _, tc := range []struct {
		event        producer.Event
		field, value string // value: a quoted part of the message
	}{
		{producer.Event{}, "Subject", "is empty"},
		{producer.Event{Subject: "events.*"}, "Subject", `"events.*" contains the wildcard "*"`},
		{producer.Event{Subject: "events.>"}, "Subject", `"events.>" contains the wildcard ">"`},
		{producer.Event{Subject: "events..order"}, "Subject", `"events..order" has an empty token`},
		{producer.Event{Subject: ".events"}, "Subject", "empty token"},
		{producer.Event{Subject: "events."}, "Subject", "empty token"},
		{producer.Event{Subject: "events order"}, "Subject", `"events order" contains whitespace`},
		{producer.Event{Subject: "events.\torder"}, "Subject", "whitespace or a control byte"},
		{producer.Event{Subject: "events.\xff"}, "Subject", "not valid UTF-8"},
		{producer.Event{Subject: "$JS.API.STREAM.DELETE.EVENTS"}, "Subject", `"$JS.API.STREAM.DELETE.EVENTS" is reserved: subjects that begin with $ belong to the NATS system`},
		{producer.Event{Subject: "_INBOX.abc.1"}, "Subject", "reply inboxes"},
		{producer.Event{Subject: "events.a", IdempotencyKey: "k\x00"}, "IdempotencyKey", "NUL byte"},
		{producer.Event{Subject: "events.a", IdempotencyKey: "k\xff"}, "IdempotencyKey", "not valid UTF-8"},
		{producer.Event{Subject: "events.a", IdempotencyKey: "nl\nkey"}, "IdempotencyKey", `"nl\nkey" contains the control character '\n'`},
		{producer.Event{Subject: "events.a", IdempotencyKey: "cr\rkey"}, "IdempotencyKey", "Outbox-Idempotency-Key header"},
		{producer.Event{Subject: "events.a", IdempotencyKey: "tab\tkey"}, "IdempotencyKey", "control character"},
		{producer.Event{Subject: "events.a", IdempotencyKey: "del\x7f"}, "IdempotencyKey", "control character"},
		{producer.Event{Subject: "events.a", OrderingKey: "o\x00"}, "OrderingKey", "NUL byte"},
		{producer.Event{Subject: "events.a", IdempotencyKey: strings.Repeat("k", 1025)}, "IdempotencyKey", "is 1025 bytes; this table holds keys of at most 1024 bytes"},
		{producer.Event{Subject: "events.a", OrderingKey: strings.Repeat("o", 1025)}, "OrderingKey", "at most 1024 bytes"},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"": {"v"}}}, "Headers", "a header name is empty"},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"Bad Name": {"v"}}}, "Headers", `header name "Bad Name": byte ' ' is not allowed`},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"Bad:Name": {"v"}}}, "Headers", "HTTP tokens"},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"X": {"ok", "a\r\nInjected: yes"}}}, "Headers", `header "X": value "a\r\nInjected: yes" contains CR, LF or NUL`},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"X": {"a\x00"}}}, "Headers", "CR, LF or NUL"},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"X": {"\xff"}}}, "Headers", "not valid UTF-8"},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"Nats-Msg-Id": {"x"}}}, "Headers", `header "Nats-Msg-Id" is set by the relay`},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"nats-msg-id": {"x"}}}, "Headers", `header "nats-msg-id" is set by the relay`},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"Outbox-Id": {"1"}}}, "Headers", `header "Outbox-Id" is set by the relay`},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"OUTBOX-ATTEMPT": {"1"}}}, "Headers", "set by the relay"},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"outbox-anything": {"1"}}}, "Headers", "set by the relay"},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"Nats-Rollup": {"all"}}}, "Headers", `header "Nats-Rollup" is reserved for the JetStream server`},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"nats-ttl": {"1s"}}}, "Headers", `header "nats-ttl" is reserved for the JetStream server`},
		{producer.Event{Subject: "events.a", Headers: producer.Header{"NATS-EXPECTED-STREAM": {"EVENTS"}}}, "Headers", "reserved for the JetStream server"},
	} {
		ctx := context.Background()
		tx, err := b.prod.BeginTx(ctx, nil)
		require.NoError(t, err)
		// A valid event first: nothing is written when a later one is invalid.
		res, err := b.w.Write(ctx, tx, ok, tc.event)
		require.Nil(t, res)
		require.ErrorIs(t, err, producer.ErrInvalidEvent, "%+v", tc.event)
		var invalid *producer.InvalidEventError
		require.True(t, errors.As(err, &invalid))
		require.Equal(t, 1, invalid.Index)
		require.Equal(t, tc.field, invalid.Field, err.Error())
		require.True(t, strings.HasPrefix(err.Error(), "outbox event 1: "+tc.field+": "), err.Error())
		require.Contains(t, err.Error(), tc.value)
		var n int
		require.NoError(t, tx.QueryRow("SELECT COUNT(*) FROM "+b.w.Table()).Scan(&n))
		require.Zero(t, n, "nothing is written in the transaction")
		require.NoError(t, tx.Rollback())
	}
}

// TestValidationMatchesRelay checks the producer against the relay's own
// checks of a row: what Write accepts, the relay publishes; what the relay
// would make a dead letter, Write refuses. Write is stricter in two ways,
// marked: text must be valid UTF-8 (PostgreSQL and JSON need it), and every
// Outbox-* name is reserved, not only the four the relay sets today.
func TestValidationMatchesRelay(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")

	subjects := []struct {
		subject  string
		stricter bool
	}{
		{subject: "events.order.created"}, {subject: "a"}, {subject: "events.a*b"}, {subject: "events.a>"},
		{subject: "ünïcode.subject"}, {subject: "events.$sys"}, {subject: ""}, {subject: "events.*"},
		{subject: ">"}, {subject: "a..b"}, {subject: "a b"}, {subject: "a\x7f"}, {subject: "a\x00"},
		{subject: "a.\xff", stricter: true},
		// Subjects the NATS system reserves: a row to $JS.API.STREAM.DELETE.X
		// would delete a stream.
		{subject: "$JS.API.STREAM.DELETE.EVENTS"}, {subject: "$JS.ACK.EVENTS.c.1.2.3.4.5"}, {subject: "$SYS.REQ.SERVER.PING"},
		{subject: "$O.bucket.M.x"}, {subject: "_INBOX.x.y"}, {subject: "$KV.bucket.key"}, {subject: "events.$JS.API.x"},
		// A NATS server closes the connection of a publish line longer than
		// its max_control_line (4096 bytes by default).
		{subject: "events." + strings.Repeat("x", 4000-len("events."))},
		{subject: "events." + strings.Repeat("x", 4001-len("events."))},
		{subject: "events." + strings.Repeat("x", 5000)},
	}
	for i, tc := range subjects {
		relayErr := outbox.CheckSubject(tc.subject)
		res, err := b.try(t, producer.Event{Subject: tc.subject, IdempotencyKey: fmt.Sprintf("s%d", i)})
		switch {
		case err == nil:
			require.NoError(t, relayErr, "Write accepted subject %q, the relay refuses it", tc.subject)
			require.False(t, res[0].AlreadyEnqueued)
		case tc.stricter:
			require.ErrorIs(t, err, producer.ErrInvalidEvent)
		default:
			require.ErrorIs(t, err, producer.ErrInvalidEvent)
			require.Error(t, relayErr, "Write refused subject %q, the relay accepts it: %v", tc.subject, err)
		}
	}

	headers := []struct {
		h        producer.Header
		stricter bool
	}{
		{h: producer.Header{"Content-Type": {"application/json"}}},
		{h: producer.Header{"X-Many": {"a", "b", ""}}},
		{h: producer.Header{"traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}},
		{h: producer.Header{"!#$%&'*+-.^_`|~09azAZ": {"tokens"}}},
		{h: producer.Header{"X": {`quotes " and \ backslash, <html> & ünïcode`}}},
		{h: producer.Header{"Nats-Expected-Stream": {"EVENTS"}}},
		{h: producer.Header{"Nats-Rollup": {"all"}}},
		{h: producer.Header{"nats-ttl": {"1s"}}},
		{h: producer.Header{"Nats": {"not reserved"}}},
		{h: producer.Header{"X-Nats-Rollup": {"not reserved"}}},
		{h: producer.Header{"Outbox": {"not reserved"}}},
		{h: producer.Header{"Nats-Msg-Id": {"x"}}},
		{h: producer.Header{"outbox-id": {"1"}}},
		{h: producer.Header{"Outbox-Idempotency-Key": {"k"}}},
		{h: producer.Header{"Outbox-Created-At": {"t"}}},
		{h: producer.Header{"Outbox-Attempt": {"1"}}},
		{h: producer.Header{"Outbox-Future": {"1"}}, stricter: true},
		{h: producer.Header{"a b": {"1"}}},
		{h: producer.Header{"a:b": {"1"}}},
		{h: producer.Header{"ü": {"1"}}},
		{h: producer.Header{"X": {"a\nb"}}},
		{h: producer.Header{"X": {"a\rb"}}},
		{h: producer.Header{"X": {"a\x00b"}}},
		{h: producer.Header{"X": {"\xff"}}, stricter: true},
	}
	for i, tc := range headers {
		res, err := b.try(t, producer.Event{Subject: "events.h", Headers: tc.h, IdempotencyKey: fmt.Sprintf("h%d", i)})
		relayErr := relayHeaders(tc.h)
		switch {
		case err == nil:
			require.NoError(t, relayErr, "Write accepted headers %q, the relay refuses them", tc.h)
			require.Equal(t, map[string][]string(tc.h), b.row(t, res[0].ID).headers, "the relay reads the headers back as written")
		case tc.stricter:
			require.ErrorIs(t, err, producer.ErrInvalidEvent)
		default:
			require.ErrorIs(t, err, producer.ErrInvalidEvent)
			require.Error(t, relayErr, "Write refused headers %q, the relay accepts them: %v", tc.h, err)
		}
	}
}

// relayHeaders is what the relay says of a row whose headers column holds
// h, written as the table contract describes.
func relayHeaders(h producer.Header) error {
	obj := map[string]any{}
	for name, values := range h {
		if len(values) == 1 {
			obj[name] = values[0]
		} else {
			obj[name] = values
		}
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	_, err = outbox.ParseHeaders(raw)
	return err
}

// TestWriteRefusesPayloadOverMaxPayload: with Config.MaxPayload set, an
// event whose payload cannot fit it with the headers of its message is
// refused (the relay would make the row a dead letter); without it, the
// payload is not checked.
func TestWriteRefusesPayloadOverMaxPayload(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	ctx := context.Background()
	const maxPayload = 4096
	w, err := producer.New(producer.Config{Table: b.w.Table(), Dialect: producer.SQLite, MaxPayload: maxPayload})
	require.NoError(t, err)
	// The headers of the message of key "k": Nats-Msg-Id, Outbox-Id,
	// Outbox-Idempotency-Key, Outbox-Created-At, Outbox-Attempt, at their
	// shortest, as the NATS client counts them.
	headers := len("NATS/1.0\r\n\r\n") + len("Nats-Msg-Id: k\r\n") + len("Outbox-Id: 1\r\n") +
		len("Outbox-Idempotency-Key: k\r\n") + len("Outbox-Created-At: 2026-12-01T10:00:00Z\r\n") + len("Outbox-Attempt: 1\r\n")
	write := func(w *producer.Writer, key string, size int) error {
		tx, err := b.prod.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		_, err = w.Write(ctx, tx, producer.Event{Subject: "events.a", IdempotencyKey: key, Payload: make([]byte, size)})
		return err
	}
	require.NoError(t, write(w, "k", maxPayload-headers), "a payload that fits with the least headers")
	err = write(w, "k", maxPayload-headers+1)
	var invalid *producer.InvalidEventError
	require.ErrorAs(t, err, &invalid)
	require.Equal(t, "Payload", invalid.Field)
	require.Contains(t, invalid.Reason, "over the NATS server's max_payload of 4096 bytes")
	require.NoError(t, write(b.w, "k", 1<<20), "without MaxPayload, not checked")

	_, err = producer.New(producer.Config{MaxPayload: -1})
	require.ErrorContains(t, err, "invalid config: MaxPayload")
}
