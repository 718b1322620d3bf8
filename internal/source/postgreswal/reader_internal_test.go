package postgreswal

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// TestReaderEmitsRowsInCommitOrder: the reader alone, on a real slot, with
// the test in the pipeline's place (taking its events). Two transactions
// open at once commit in the reverse of their ids' order, a third rolls
// back, and a fourth inserts a row already settled: the reader hands over
// the rows of each committed transaction after the ones of the
// transaction that committed before it, each with its transaction's xid,
// a commit event after each transaction's rows, nothing of the rolled back
// one or of the settled row, and the sweep's watermark where it was
// written in the log.
func TestReaderEmitsRowsInCommitOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newMarkerTable(t, "postgres-logical")
	url, table := m.url, m.table
	slot, pub := bridgetest.WALNames(t, url)
	names := Names{Table: table, Slot: slot, Publication: pub}
	_, _, err := Setup(ctx, m.db.SQL, names)
	require.NoError(t, err)
	s, err := NewSubscriber(ctx, m.db, m.store, slog.New(slog.NewTextHandler(io.Discard, nil)), Config{Names: names, ReplicationURL: url})
	require.NoError(t, err)
	t.Cleanup(s.hardCancel)

	first, err := m.db.SQL.Begin()
	require.NoError(t, err)
	a1 := m.insert(t, first, "a1", "events.a")
	second, err := m.db.SQL.Begin()
	require.NoError(t, err)
	b1 := m.insert(t, second, "b1", "events.b")
	a2 := m.insert(t, first, "a2", "events.a")
	var firstXID, secondXID int64
	require.NoError(t, first.QueryRow(`SELECT txid_current()`).Scan(&firstXID))
	require.NoError(t, second.QueryRow(`SELECT txid_current()`).Scan(&secondXID))
	require.NoError(t, second.Commit())
	require.NoError(t, first.Commit())
	rolledBack, err := m.db.SQL.Begin()
	require.NoError(t, err)
	m.insert(t, rolledBack, "c1", "events.c")
	require.NoError(t, rolledBack.Rollback())
	_, err = m.db.SQL.Exec(`INSERT INTO ` + table + ` (idempotency_key, subject, payload, status) VALUES ('settled', 'events.d', 'x', 'done')`)
	require.NoError(t, err)
	_, err = m.db.SQL.Exec("SELECT pg_logical_emit_message(true, $1, 'token-1')", s.cfg.watermarkPrefix())
	require.NoError(t, err)

	ended := make(chan error, 1)
	go func() {
		_, err := s.stream.session(false)
		ended <- err
	}()
	stop := sync.OnceFunc(func() { close(s.stream.stop) })
	t.Cleanup(stop) // the slot is free again before it is dropped
	type got struct {
		kind  eventKind
		id    int64  // a row's
		xid   uint32 // a begin's
		token string // a watermark's
	}
	var events []got
	done := func() bool { // through the watermark
		return slices.ContainsFunc(events, func(e got) bool { return e.kind == evWatermark && e.token == "token-1" })
	}
	for !done() {
		select {
		case batch := <-s.events:
			for _, ev := range batch {
				switch ev.kind {
				case evPosition:
				case evRow:
					events = append(events, got{kind: ev.kind, id: ev.row.row.ID})
				default:
					events = append(events, got{kind: ev.kind, xid: ev.xid, token: ev.token})
				}
			}
		case err := <-ended:
			t.Fatalf("the session ended: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no more events; so far %+v", events)
		}
	}
	stop()
	require.True(t, errors.Is(<-ended, errStopped))
	// A subscriber gets the begin and commit of the transactions that hold
	// rows of its table, and every watermark: the settled row's
	// transaction, and those of the logical messages other tests write
	// into the log meanwhile (their sweeps' watermarks reach every slot of
	// the database), come as watermarks of other tokens or not at all.
	var relayed []got
	for _, ev := range events {
		if ev.kind != evWatermark || ev.token == "token-1" {
			relayed = append(relayed, ev)
		}
	}
	require.Equal(t, []got{
		{kind: evBegin, xid: uint32(secondXID)},
		{kind: evRow, id: b1},
		{kind: evCommit},
		{kind: evBegin, xid: uint32(firstXID)},
		{kind: evRow, id: a1},
		{kind: evRow, id: a2},
		{kind: evCommit},
		{kind: evWatermark, token: "token-1"},
	}, relayed, "all events: %+v", events)
}
