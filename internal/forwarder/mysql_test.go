package forwarder_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// On MariaDB: 10,000 rows from 8 concurrent producer transactions, some
// with ordering keys (each key written by one producer), relayed by two
// relays at once. The stream holds every row exactly once, per-key order
// is id order, and every row is done with its stream and sequence.
func TestMySQLTwoRelaysDeliverEveryRowOnceInKeyOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, "mysql")
	relayA := b.startRelay(t, "relay-a")
	relayB := b.startRelay(t, "relay-b")

	// Watch the table while it is relayed: per key, never two rows in
	// flight, checked after every claim of either relay (b.claims).
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchErr := make(chan error, 1)
	go func() {
		q := "SELECT ordering_key, COUNT(*) FROM " + b.store.Table() + " WHERE status = 'in_flight' AND ordering_key IS NOT NULL GROUP BY ordering_key HAVING COUNT(*) > 1"
		for watchCtx.Err() == nil {
			var key string
			var n int
			err := b.prod.QueryRowContext(watchCtx, q).Scan(&key, &n)
			switch {
			case err == nil:
				watchErr <- fmt.Errorf("ordering key %s has %d rows in flight at once", key, n)
				return
			case !errors.Is(err, sql.ErrNoRows) && watchCtx.Err() == nil:
				watchErr <- err
				return
			}
			select {
			case <-b.claims.C():
			case <-watchCtx.Done():
			}
		}
		watchErr <- nil
	}()

	const producers, perProducer, perTx = 8, 1250, 25
	want := b.produce(t, producers, perProducer, perTx, func(p, i, n int) produced {
		r := produced{
			key:     fmt.Sprintf("p%d-%d", p, i),
			subject: fmt.Sprintf("events.p%d", p),
			payload: payloadFor(n),
			headers: map[string][]string{"X-Row": {strconv.Itoa(n)}},
		}
		if i%3 != 0 {
			r.orderingKey = fmt.Sprintf("p%d-order-%d", p, n%7)
		}
		return r
	})
	const total = producers * perProducer
	b.waitDone(t, total)
	stopWatch()
	require.NoError(t, <-watchErr)
	relayA.stop()
	relayB.stop()
	a, bb := relayA.sub.Counters.Relayed.Load(), relayB.sub.Counters.Relayed.Load()
	t.Logf("relay-a relayed %d rows, relay-b %d", a, bb)
	require.Positive(t, a, "both relays took part")
	require.Positive(t, bb, "both relays took part")
	require.Equal(t, int64(total), a+bb, "no row relayed twice")

	msgs := bridgetest.Messages(t, b.js, "EVENTS")
	require.Len(t, msgs, total)
	seen := map[string]bool{}
	lastIDPerKey := map[string]int64{}
	seqOfRow := map[int64]uint64{}
	for _, m := range msgs {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		require.False(t, seen[id], "message %s twice", id)
		seen[id] = true
		r, ok := want[id]
		require.True(t, ok, "unexpected Nats-Msg-Id %q", id)
		require.Equal(t, r.subject, m.Subject())
		require.True(t, bytes.Equal(r.payload, m.Data()), "payload of %s differs", r.key)
		require.Equal(t, r.headers["X-Row"], m.Headers()["X-Row"])
		rowID, err := strconv.ParseInt(m.Headers().Get("Outbox-Id"), 10, 64)
		require.NoError(t, err)
		meta, err := m.Metadata()
		require.NoError(t, err)
		seqOfRow[rowID] = meta.Sequence.Stream
		if r.orderingKey != "" {
			require.Greater(t, rowID, lastIDPerKey[r.orderingKey], "ordering key %s out of order", r.orderingKey)
			lastIDPerKey[r.orderingKey] = rowID
		}
	}
	require.Len(t, lastIDPerKey, producers*7)

	rows, err := b.db.SQL.Query("SELECT id, status, relayed_at IS NOT NULL, owner IS NULL, stream, stream_seq, attempts FROM " + b.store.Table())
	require.NoError(t, err)
	defer rows.Close()
	var count int
	for rows.Next() {
		var id, seq int64
		var status, stream string
		var relayed, ownerCleared bool
		var attempts int
		require.NoError(t, rows.Scan(&id, &status, &relayed, &ownerCleared, &stream, &seq, &attempts))
		require.Equal(t, "done", status)
		require.True(t, relayed)
		require.True(t, ownerCleared)
		require.Equal(t, "EVENTS", stream)
		require.Equal(t, seqOfRow[id], uint64(seq), "stream_seq of row %d", id)
		require.Equal(t, 1, attempts, "row %d claimed once", id)
		count++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, total, count)
}
