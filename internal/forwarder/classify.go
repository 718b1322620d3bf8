package forwarder

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
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
// buffer, see broker.ConnectConfig); the outcome is unknown, the row is retried as soon as the relay is
// connected, and the attempt is not counted. A connection closed for good
// (nats.ErrConnectionClosed) is Retryable instead: the server closes a
// connection for what a publish sent (a publish line over its
// max_control_line), the relay then starts again with a new connection,
// and a row that closes every connection it is sent on must use up its
// attempts and become a dead letter rather than close connections forever. A message the relay
// held past its publish deadline and did not send
// (outbox.ErrPublishDeadline) is Unavailable too, and so is one not sent
// because an earlier message of its turn chain was not
// (sink.ErrTurnBroken, postgres-wal).
//
// Permanent: the payload is over the server's max_payload
// (nats.ErrMaxPayload, checked by the client), an invalid subject or
// header (nats.ErrBadSubject, nats.ErrBadHeaderMsg), a subject the relay's
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
func Classify(err error) outbox.FailureClass {
	if errors.Is(err, outbox.ErrPublishDeadline) || errors.Is(err, sink.ErrTurnBroken) {
		return outbox.Unavailable // never sent: not the row's fault
	}
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrBadHeaderMsg) ||
		errors.Is(err, broker.ErrPublishDenied) {
		return outbox.Permanent
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && permanentCodes[apiErr.ErrorCode] {
		return outbox.Permanent
	}
	for _, unavailable := range []error{nats.ErrDisconnected, nats.ErrConnectionReconnecting, nats.ErrConnectionDraining, nats.ErrNoServers,
		nats.ErrReconnectBufExceeded} {
		if errors.Is(err, unavailable) {
			return outbox.Unavailable
		}
	}
	return outbox.Retryable
}
