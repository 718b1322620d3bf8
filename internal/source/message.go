package source

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// NewDelivery turns a row into the delivery a source hands to the
// forwarder (DESIGN.md, "The message made from a row"): subject = the
// row's subject; the NATS message's data = the payload, unchanged; its
// headers = the row's own headers (already validated by the caller with
// outbox.ParseHeaders; the caller checks the subject with
// outbox.CheckSubject), then
// Nats-Msg-Id = outbox.MsgID(namespace, row.IdempotencyKey) and the Outbox-*
// headers (Outbox-Attempt is row.Attempt), which a row cannot set. Every
// source of the bridge table builds its deliveries here, so that the same
// row gives the same message whichever source reads it.
func NewDelivery(row outbox.Row, headers map[string][]string, namespace string) *Delivery {
	d := new(Delivery)
	FillDelivery(d, new(nats.Msg), row, headers, namespace)
	return d
}

// FillDelivery fills d and its NATS message m (NewDelivery) in place: the
// table source allocates a claim's deliveries and messages together.
func FillDelivery(d *Delivery, m *nats.Msg, row outbox.Row, headers map[string][]string, namespace string) {
	// The relay's five values in one allocation; the header map sized
	// for every entry, so that it does not grow. Names assigned as written,
	// not canonicalised: consumers see the row's header names byte for
	// byte (the relay's own are in canonical form already).
	values := [...]string{
		outbox.MsgID(namespace, row.IdempotencyKey),
		strconv.FormatInt(row.ID, 10),
		row.IdempotencyKey,
		row.CreatedAt.UTC().Format(time.RFC3339Nano),
		strconv.Itoa(row.Attempt),
	}
	relay := values[:]
	h := make(nats.Header, len(headers)+len(outbox.RelayHeaders))
	for name, v := range headers {
		h[name] = v
	}
	for i, name := range outbox.RelayHeaders {
		h[name] = relay[i : i+1 : i+1]
	}
	*m = nats.Msg{Subject: row.Subject, Data: row.Payload, Header: h}
	d.Subject, d.Msg = row.Subject, m
}
