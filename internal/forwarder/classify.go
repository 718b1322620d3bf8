package forwarder

import (
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
)

// JetStream API error codes that retrying cannot fix (nats-server
// server/errors.json): the message itself, the stream or the producer's
// expectations are wrong.
var permanentCodes = map[jetstream.ErrorCode]bool{
	10054: true, // JSStreamMessageExceedsMaximumErr: message size exceeds the stream's max_msg_size
	10097: true, // JSStreamHeaderExceedsMaximumErr: header size exceeds maximum
	10060: true, // JSStreamMismatchErr: expected stream does not match
	10109: true, // JSStreamSealedErr: stream is sealed
	10071: true, // JSStreamWrongLastSequenceErr: wrong last sequence
	10164: true, // JSStreamWrongLastSequenceConstantErr
	10070: true, // JSStreamWrongLastMsgIDErr: wrong last msg ID
	10111: true, // JSStreamRollupFailedF: rollup not permitted on the stream, or an invalid Nats-Rollup value
	10166: true, // JSMessageTTLDisabledErr: per-message TTL is disabled on the stream
}

// Classify says what a failed publish means for its row.
//
// Unavailable: the connection to NATS was not up (nats.ErrDisconnected,
// ErrConnectionReconnecting, ErrConnectionDraining, ErrNoServers, and
// ErrReconnectBufExceeded: a publish while reconnecting without a reconnect
// buffer, see broker.ConnectConfig); the server answered nothing sent after
// the publish (sink.ErrUnresponsive: a frozen server); or it refused the
// relay's reply inbox (broker.ErrInboxDenied: no PubAck can arrive, and the
// relay claims nothing while it lasts). The outcome is unknown, the row is
// retried as soon as the relay can publish, and the attempt is not counted.
//
// A connection closed for good is the relay's to heal (it starts again
// with a new connection); which rows it charges depends on why. When the
// server closed it for a protocol line over its max_control_line, the rows
// whose subject is the longest sent on the connection closed it
// (sink.ErrLineTooLong: Permanent, below), and the others did not
// (sink.ErrClosedByAnother: Unavailable). For any other reason
// (nats.ErrConnectionClosed) the rows in flight are Retryable: a row that
// closes every connection it is sent on uses up its attempts and becomes a
// dead letter rather than close connections forever. A row never sent
// (sink.ErrNotSent), held by the relay past its publish deadline and not
// sent (source.ErrPublishDeadline), or not sent because an earlier message
// of its turn chain was not (sink.ErrTurnBroken, postgres-wal), is
// Unavailable; so is one handed over so late that its ack deadline cut
// its wait for the PubAck short (sink.ErrAckDeadline).
//
// Permanent: the payload is over the server's max_payload
// (nats.ErrMaxPayload, checked by the client), an invalid subject or
// header (nats.ErrBadSubject, nats.ErrBadHeaderMsg), a publish line longer
// than the server's max_control_line (sink.ErrLineTooLong: the server
// closed the connection for it, and would close every new one; a server
// configured below the 4,096-byte default the relay's subject bound
// assumes), a subject the relay's
// NATS user may not publish to (broker.ErrPublishDenied: permissions are
// the account's configuration, which retrying does not change; after the
// permission is granted, `bridge retry --subject` sends the dead letters
// again — while a retry would hold the row's ordering key for about an
// hour of backoff for nothing), or one of the
// JetStream API error codes above (rows and Watermill envelopes cannot set
// the Nats-Rollup or Nats-TTL header behind 10111 and 10166, but should
// one reach the server, retrying would not help). Everything else is
// retryable: timeouts
// and disconnects (outcome unknown: the row is published again with the
// same Nats-Msg-Id), no stream for the subject (jetstream.ErrNoStreamResponse),
// 503 no responders, leader changes, "duplicate message id is in process"
// (10158), too many requests (10167), insufficient resources (10023),
// not leader (10009), stream offline (10118), stream full with
// discard-new (10077).
//
// Held: the stream cannot take messages now — no leader, no quorum, the
// JetStream API not answering while the connection is up
// (*broker.StreamUnavailableError, which broker.Keeper.Diagnose makes from
// the server's own answers): the broker's outage. The row waits
// broker.OutageHoldBack, its attempt is not counted and its last_error
// names the stream, so no outage, however long, makes a dead letter.
func Classify(err error) source.FailureClass {
	if errors.Is(err, broker.ErrBrokerUnavailable) {
		return source.Held
	}
	if errors.Is(err, source.ErrPublishDeadline) || errors.Is(err, sink.ErrTurnBroken) || errors.Is(err, sink.ErrNotSent) {
		return source.Unavailable // never sent: not the row's fault
	}
	if errors.Is(err, sink.ErrClosedByAnother) || errors.Is(err, sink.ErrUnresponsive) || errors.Is(err, broker.ErrInboxDenied) {
		return source.Unavailable // the connection's fault, not the row's
	}
	if errors.Is(err, sink.ErrAckDeadline) {
		return source.Unavailable // handed over late: the relay's delay, not the row's fault
	}
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrBadHeaderMsg) ||
		errors.Is(err, broker.ErrPublishDenied) || errors.Is(err, sink.ErrLineTooLong) {
		return source.Permanent
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && permanentCodes[apiErr.ErrorCode] {
		return source.Permanent
	}
	for _, unavailable := range []error{nats.ErrDisconnected, nats.ErrConnectionReconnecting, nats.ErrConnectionDraining, nats.ErrNoServers,
		nats.ErrReconnectBufExceeded} {
		if errors.Is(err, unavailable) {
			return source.Unavailable
		}
	}
	return source.Retryable
}

// Own reports whether err, a failed publish as report has it (after
// Diagnose), is tied to its row by the server's own answer
// (source.Outcome.Own): the duplicate-window guard refused it (its stream
// found unsafe), the server answered that no stream captures its subject
// (broker.ErrNoStreamAnswered), or the PubAck carries a JetStream API
// error that is the stream's refusal of the message (full with
// discard-new, a size or sequence check; not broker.IsOutageCode). Every
// failure without such an answer — a timeout, 503 no responders alone, a
// disconnect, the broker's outage — is not: it may be the whole
// destination's.
func Own(err error) bool {
	if err == nil || errors.Is(err, broker.ErrBrokerUnavailable) {
		return false
	}
	var refused refusedError
	if errors.As(err, &refused) || errors.Is(err, broker.ErrNoStreamAnswered) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || broker.IsOutageCode(apiErr.ErrorCode) {
		return false
	}
	// 10077 (JSStreamStoreFailedF) carries the store's own error: a limit
	// of the stream with discard-new ("maximum messages exceeded",
	// "maximum bytes exceeded", "maximum messages per subject exceeded")
	// refuses the message; any other (a disk failing) is the server's.
	return apiErr.ErrorCode != 10077 || strings.Contains(apiErr.Description, "maximum")
}
