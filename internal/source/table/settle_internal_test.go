package table

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestSettlementAfterTheSettleLoopEnded: a settlement that comes after the
// subscriber closed (an outcome reported after its drain gave up, a batch
// taken over then; a tenant dropped with rows in flight) is dropped, its
// row left to its lease: it neither blocks nor panics. (Before, it was sent
// on the closed settlement channel, and the panic ended the relay for
// every table: a newcomer's trial.)
func TestSettlementAfterTheSettleLoopEnded(t *testing.T) {
	_, _, store := bridgetest.Outbox(t, "sqlite")
	sub, err := NewSubscriber(store, slog.New(slog.DiscardHandler), SubscriberConfig{Owner: "r", MaxInFlight: 1})
	require.NoError(t, err)
	_, err = sub.Subscribe(context.Background(), store.Table())
	require.NoError(t, err)
	require.NoError(t, sub.Close())
	for range 3 { // more than the queue holds
		sub.settle(settled(outbox.Row{ID: 1, Attempt: 1}))
	}
}
