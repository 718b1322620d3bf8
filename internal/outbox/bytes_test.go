package outbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

var enqueuePayload = bridgetest.EnqueuePayload

func ids(rows []outbox.Row) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// TestClaimStopsAtTheByteBound: a claim takes rows in id order while
// their payloads and headers fit ClaimParams.MaxBytes, and the first row
// whatever its size, so that a row larger than the bound is relayed too.
func TestClaimStopsAtTheByteBound(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := setup(t, kind)
			ctx := context.Background()
			a, b, c := enqueuePayload(t, s, "a", 1000), enqueuePayload(t, s, "b", 2000), enqueuePayload(t, s, "c", 3000)

			rows, err := s.ClaimBatch(ctx, outbox.ClaimParams{Owner: "relay", Limit: 10, MaxBytes: 3500})
			require.NoError(t, err)
			require.Equal(t, []int64{a, b}, ids(rows), "the third row would pass 3,500 bytes")
			for _, r := range rows {
				require.Len(t, r.Payload, int(r.PayloadSize))
				require.False(t, r.PayloadLeftOut)
			}
			rows, err = s.ClaimBatch(ctx, outbox.ClaimParams{Owner: "relay", Limit: 10, MaxBytes: 10})
			require.NoError(t, err)
			require.Equal(t, []int64{c}, ids(rows), "the first row is taken whatever its size")
			require.Len(t, rows[0].Payload, 3000)
		})
	}
}

// TestClaimLeavesOutPayloadsOverMaxPayload: a payload longer than
// ClaimParams.MaxPayload is not read: the row comes with its length,
// computed by the database, and counts nothing against MaxBytes.
func TestClaimLeavesOutPayloadsOverMaxPayload(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := setup(t, kind)
			big := enqueuePayload(t, s, "big", 5000)
			atLimit := enqueuePayload(t, s, "at-limit", 4000)
			small := enqueuePayload(t, s, "small", 10)

			rows, err := s.ClaimBatch(context.Background(), outbox.ClaimParams{Owner: "relay", Limit: 10, MaxBytes: 4100, MaxPayload: 4000})
			require.NoError(t, err)
			require.Equal(t, []int64{big, atLimit, small}, ids(rows), "the payload left out takes no room")
			require.True(t, rows[0].PayloadLeftOut)
			require.Nil(t, rows[0].Payload)
			require.Equal(t, int64(5000), rows[0].PayloadSize)
			require.False(t, rows[1].PayloadLeftOut, "a payload of exactly MaxPayload is read")
			require.Len(t, rows[1].Payload, 4000)
			require.Equal(t, []byte("xxxxxxxxxx"), rows[2].Payload)
			require.Equal(t, "events.t", rows[0].Subject, "the rest of the row is read")
		})
	}
}

// TestMessageHeaderBytesIsWhatNATSCounts: a message whose payload and
// headers, as messageHeaderBytes counts them, make max_payload is
// published; one byte more is refused by the NATS client. Hence a payload
// longer than max_payload less RelayHeaderMinBytes can never be published,
// and the relay does not read it.
func TestMessageHeaderBytesIsWhatNATSCounts(t *testing.T) {
	t.Parallel()
	const maxPayload = 4096
	srv := bridgetest.StartNATSWithOptions(t, func(o *server.Options) { o.MaxPayload = maxPayload })
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	for name, h := range map[string]map[string][]string{
		"the least a row's message has": {
			outbox.HeaderMsgID: {"x"}, outbox.HeaderID: {"1"}, outbox.HeaderIdempotencyKey: {" "},
			outbox.HeaderCreatedAt: {"2026-12-01T10:00:00Z"}, outbox.HeaderAttempt: {"1"},
		},
		"user headers, values with spaces": {
			"Content-Type": {"application/json"}, "X-Many": {"a", " b ", "\tc"}, outbox.HeaderMsgID: {"sha256:" + strings.Repeat("0", 64)},
		},
	} {
		size := outbox.MessageHeaderBytes(h)
		for _, over := range []bool{false, true} {
			m := &nats.Msg{Subject: "x", Header: nats.Header(h), Data: make([]byte, maxPayload-size)}
			if over {
				m.Data = append(m.Data, 0)
			}
			err := nc.PublishMsg(m)
			if over {
				require.ErrorIs(t, err, nats.ErrMaxPayload, "%s: one byte over", name)
			} else {
				require.NoError(t, err, "%s: exactly max_payload", name)
			}
		}
	}
	require.Equal(t, outbox.RelayHeaderMinBytes, outbox.MessageHeaderBytes(map[string][]string{
		outbox.HeaderMsgID: {"x"}, outbox.HeaderID: {"1"}, outbox.HeaderIdempotencyKey: {" "},
		outbox.HeaderCreatedAt: {"2026-12-01T10:00:00Z"}, outbox.HeaderAttempt: {"1"},
	}))
}
