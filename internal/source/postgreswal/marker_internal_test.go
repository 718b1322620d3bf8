package postgreswal

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// markerTable is a migrated bridge table (bridgetest.Outbox of kind
// "postgres", or "postgres-logical" where a slot is read) with its
// statements.
type markerTable struct {
	url   string
	db    *outbox.DB
	table string
	q     outbox.WALStatements
	store *outbox.Store
}

func newMarkerTable(t *testing.T, kind string) *markerTable {
	t.Helper()
	url, table, store := bridgetest.Outbox(t, kind)
	q, ok := store.WALStatements()
	require.True(t, ok)
	return &markerTable{url: url, db: store.DB(), table: table, q: q, store: store}
}

// insert commits a pending row and returns its id.
func (m *markerTable) insert(t *testing.T, exec interface {
	QueryRow(string, ...any) *sql.Row
}, key, subject string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, exec.QueryRow(`INSERT INTO `+m.table+` (idempotency_key, subject, payload) VALUES ($1, $2, 'x') RETURNING id`, key, subject).Scan(&id))
	return id
}

// row reads a row's status, attempts, stream sequence and last error;
// status "" when the row is gone.
func (m *markerTable) row(t *testing.T, id int64) (status string, attempts int, seq int64, lastErr string) {
	t.Helper()
	var s sql.NullInt64
	var e sql.NullString
	err := m.db.SQL.QueryRow(`SELECT status, attempts, stream_seq, last_error FROM `+m.table+` WHERE id = $1`, id).Scan(&status, &attempts, &s, &e)
	if err == sql.ErrNoRows {
		return "", 0, 0, ""
	}
	require.NoError(t, err)
	return status, attempts, s.Int64, e.String
}

// startMarker runs a marker over m until the test ends; it returns the
// marker's input and output queues and its signal. adjust, when given,
// changes the marker before it runs.
func (m *markerTable) startMarker(t *testing.T, deleteOnRelay bool, counters *Counters, adjust ...func(*marker)) (*queue[markItem], *queue[*entry], *source.TestSignal[int]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mk := &marker{
		db: m.db.SQL, q: m.q, deleteOnRelay: deleteOnRelay, logger: slog.New(slog.NewTextHandler(io.Discard, nil)), counters: counters,
		marks: newQueue[markItem](), settled: newQueue[*entry](), marked: source.NewTestSignal[int](),
		writes: dbRetry{ctx: ctx, logger: slog.New(slog.NewTextHandler(io.Discard, nil)), health: new(source.LoopHealth)},
	}
	for _, f := range adjust {
		f(mk)
	}
	done := goDone(mk.run)
	t.Cleanup(func() {
		mk.marks.close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the marker did not stop")
		}
		cancel()
	})
	return mk.marks, mk.settled, mk.marked
}

// TestMarkerSettlesRowsOnceTheirTransactionIsVisible: the marker alone,
// against the table, without a slot or a pipeline. Done, dead and failed
// marks change unsettled rows; done and dead rows go back settled, a failed
// one (not set aside) does not. A row read from the log before its
// transaction is visible (here: a transaction still open) is not lost: its
// mark is tried again until the commit, then settled. A mark written twice
// changes nothing, and a row gone (deleted, its transaction visible)
// counts as settled. With delete_on_relay a done row is deleted.
func TestMarkerSettlesRowsOnceTheirTransactionIsVisible(t *testing.T) {
	t.Parallel()
	m := newMarkerTable(t, "postgres")
	table := m.table
	var counters Counters
	marks, settled, marked := m.startMarker(t, false, &counters)

	done, dead, failed, gone := m.insert(t, m.db.SQL, "a", "events.a"), m.insert(t, m.db.SQL, "b", "events.b"), m.insert(t, m.db.SQL, "c", "events.c"), m.insert(t, m.db.SQL, "d", "events.d")
	_, err := m.db.SQL.Exec(`DELETE FROM `+table+` WHERE id = $1`, gone)
	require.NoError(t, err)
	tx, err := m.db.SQL.Begin()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	late := m.insert(t, tx, "e", "events.e")
	var xid int64
	require.NoError(t, tx.QueryRow(`SELECT txid_current()`).Scan(&xid))

	entries := map[*entry]int64{}
	item := func(id int64, kind markKind) markItem {
		e := &entry{}
		entries[e] = id
		return markItem{e: e, kind: kind, id: id, attempts: 1}
	}
	doneItem := item(done, markDone)
	doneItem.stream, doneItem.seq = "EVENTS", 7
	deadItem := item(dead, markDead)
	deadItem.reason = "payload of 2 MiB exceeds max_payload 1 MiB"
	failedItem := item(failed, markFailed)
	failedItem.reason, failedItem.backoff = "nats: timeout", time.Minute
	lateItem := item(late, markDone)
	lateItem.xid, lateItem.stream, lateItem.seq = uint32(xid), "EVENTS", 8
	marks.push(doneItem, deadItem, failedItem, item(gone, markDone), lateItem)

	got := map[int64]bool{}
	take := func() {
		for _, e := range settled.take() {
			got[entries[e]] = true
		}
	}
	marked.WaitUntil(t, func() bool { take(); return len(got) >= 3 }, "the visible rows settled")
	require.Equal(t, map[int64]bool{done: true, dead: true, gone: true}, got, "done, dead and gone rows settle; the failed one and the invisible one do not")
	status, attempts, seq, _ := m.row(t, done)
	require.Equal(t, []any{"done", 1, int64(7)}, []any{status, attempts, seq})
	status, _, _, lastErr := m.row(t, dead)
	require.Equal(t, "permanent_failed", status)
	require.Contains(t, lastErr, "exceeds max_payload")
	status, _, _, lastErr = m.row(t, failed)
	require.Equal(t, "failed", status)
	require.Equal(t, "nats: timeout", lastErr)

	require.NoError(t, tx.Commit())
	marked.WaitUntil(t, func() bool { take(); return got[late] }, "the row settled once its transaction is visible")
	status, _, seq, _ = m.row(t, late)
	require.Equal(t, "done", status)
	require.Equal(t, int64(8), seq)
	require.Equal(t, int64(3), counters.Relayed.Load(), "done, gone and late")
	require.Equal(t, int64(1), counters.Dead.Load())

	// Written twice (a restart before the position was confirmed): the
	// row keeps what the first mark wrote, and settles.
	again := item(done, markDone)
	again.stream, again.seq = "EVENTS", 99
	marks.push(again)
	marked.WaitUntil(t, func() bool { take(); return got[entries[again.e]] }, "the mark written twice settled")
	_, _, seq, _ = m.row(t, done)
	require.Equal(t, int64(7), seq, "a done row is not marked again")

	t.Run("delete on relay", func(t *testing.T) {
		m := newMarkerTable(t, "postgres")
		marks, settled, marked := m.startMarker(t, true, new(Counters))
		id := m.insert(t, m.db.SQL, "a", "events.a")
		marks.push(markItem{e: &entry{}, kind: markDone, id: id, stream: "EVENTS", seq: 1})
		marked.WaitUntil(t, func() bool { return len(settled.take()) == 1 }, "the row settled")
		status, _, _, _ := m.row(t, id)
		require.Empty(t, status, "the row is deleted at its PubAck")
	})
}

// TestMarkerTriesAreBounded: a write of marks that waits for the database
// (here the row locked FOR SHARE by another session; a server that stops
// answering on a session whose socket stays open waits the same way) fails
// at its deadline and is tried again, so that the marker's record says the
// marks fail (readiness, and the stall watch's excuse) and a broken
// session is replaced; once the lock goes the mark is written. Without a
// deadline the write waited for ever, its failures never counted.
func TestMarkerTriesAreBounded(t *testing.T) {
	t.Parallel()
	m := newMarkerTable(t, "postgres")
	health := new(source.LoopHealth)
	marks, settled, marked := m.startMarker(t, false, new(Counters), func(mk *marker) {
		mk.writes.health, mk.writes.timeout = health, 300*time.Millisecond
	})
	id := m.insert(t, m.db.SQL, "a", "events.a")
	lock, err := m.db.SQL.Begin()
	require.NoError(t, err)
	defer func() { _ = lock.Rollback() }()
	_, err = lock.Exec(`SELECT id FROM `+m.table+` WHERE id = $1 FOR SHARE`, id)
	require.NoError(t, err)

	marks.push(markItem{e: &entry{}, kind: markDone, id: id, stream: "EVENTS", seq: 1})
	deadline := time.Now().Add(30 * time.Second)
	for !health.Failing() {
		require.True(t, time.Now().Before(deadline), "the marker's tries did not fail while the row was locked: %v", health.Check("marks", time.Hour))
		time.Sleep(50 * time.Millisecond)
	}
	err = health.Check("marks", time.Hour)
	require.ErrorContains(t, err, "no answer within 300ms")
	status, _, _, _ := m.row(t, id)
	require.Equal(t, "pending", status)

	require.NoError(t, lock.Rollback())
	marked.WaitUntil(t, func() bool { return len(settled.take()) == 1 }, "the row settled once the lock went")
	status, _, _, _ = m.row(t, id)
	require.Equal(t, "done", status)
	require.NoError(t, health.Check("marks", time.Hour), "the record clears with the write")
}
