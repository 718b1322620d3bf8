package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest/testdb"
)

// The driver conformance suite: the contract of executor and driver
// (driver.go) that every entry of drivers must pass, each against its real
// database, every case in a table of its own. Without the test server of
// a driver the suite is skipped, except under CI=true, where it fails
// (testdb). A new driver needs an entry in suiteDatabases.

// suiteDatabases gives each driver a fresh, unmigrated table: the database
// URL and the table name.
var suiteDatabases = map[Dialect]func(t *testing.T) (url, table string){
	DialectPostgres: func(t *testing.T) (string, string) { return testdb.PostgresTable(t) },
	DialectMySQL:    func(t *testing.T) (string, string) { return testdb.MySQLTable(t) },
	DialectSQLite:   func(t *testing.T) (string, string) { return testdb.SQLiteURL(t), "outbox" },
}

// suiteCase is one part of the contract. Cases that need concurrent
// writers (locks held by one session while another waits) run only on the
// drivers that have them.
type suiteCase struct {
	name       string
	concurrent bool
	run        func(t *testing.T, b *suiteBundle)
}

var suiteCases = []suiteCase{
	{name: "InsertRefusesAKnownKey", run: suiteInsert},
	{name: "ClaimTakesHeadsInIDOrder", run: suiteClaimHeads},
	{name: "ClaimTakesKeysInTurn", run: suiteClaimKeysInTurn},
	{name: "ClaimBoundsBytes", run: suiteClaimBytes},
	{name: "ClaimLeavesOutLongPayloads", run: suiteClaimPayload},
	{name: "ConcurrentClaimsNeverShareARow", run: suiteConcurrentClaims},
	{name: "MarksFenceAStaleLease", run: suiteFencing},
	{name: "MarkDoneDeletes", run: suiteMarkDoneDeletes},
	{name: "MarkFailedSetsStatusAndAttempts", run: suiteMarkFailed},
	{name: "RequeueMovesExpiredLeases", run: suiteRequeue},
	{name: "RetryDeadAndFailed", run: suiteRetry},
	{name: "StatusCountsAndErrors", run: suiteStatus},
	{name: "StalledSeesOnlyClaimableRows", run: suiteStalled},
	{name: "MayClaimNeverMissesARow", run: suiteMayClaim},
	{name: "BrowseListsGroupsAndReadsRows", run: suiteBrowse},
	{name: "PurgeDeletesOldDoneRows", run: suitePurge},
	{name: "NotifyOnInsert", run: suiteNotify},
	{name: "ClassifiesMissingSchema", run: suiteClassifyMissing},
	{name: "ClassifiesReadOnly", concurrent: true, run: suiteClassifyReadOnly},
	{name: "ClassifiesRefusedCredentials", run: suiteClassifyCredentials},
	{name: "ClassifiesLockTimeout", concurrent: true, run: suiteClassifyLockTimeout},
	{name: "ClassifiesDeadlock", concurrent: true, run: suiteClassifyDeadlock},
	{name: "MarksFenceALeaseTakenOverWhileTheyWait", concurrent: true, run: suiteFencingWhileWaiting},
}

func TestDriverConformance(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(string(d.dialect()), func(t *testing.T) {
			t.Parallel()
			require.Contains(t, suiteDatabases, d.dialect(), "driver %s has no test database in suiteDatabases", d.dialect())
			for _, c := range suiteCases {
				if c.concurrent && !d.capabilities().ConcurrentWrites {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, newSuiteBundle(t, d))
				})
			}
		})
	}
}

// suiteBundle is one case's migrated table and its executor.
type suiteBundle struct {
	driver driver
	db     *DB
	url    string
	table  tableName
	exec   executor
	cursor string
}

func newSuiteBundle(t *testing.T, d driver) *suiteBundle {
	t.Helper()
	ctx := context.Background()
	url, table := suiteDatabases[d.dialect()](t)
	db, err := Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.Equal(t, d.dialect(), db.Dialect(), "the URL opens the driver under test")
	_, err = Migrate(ctx, db, table)
	require.NoError(t, err)
	tn, err := ParseTableName(table)
	require.NoError(t, err)
	ex, err := d.executor(db, tn)
	require.NoError(t, err)
	require.NoError(t, ex.Probe(ctx))
	return &suiteBundle{driver: d, db: db, url: url, table: tn, exec: ex}
}

// insert adds a row with payload and ordering key (none when ""); the
// idempotency key is the payload.
func (b *suiteBundle) insert(t *testing.T, payload, key string) int64 {
	t.Helper()
	p := &insertParams{IdempotencyKey: payload, Subject: "events." + payload, Payload: []byte(payload), Headers: "{}"}
	if key != "" {
		p.OrderingKey = sql.NullString{String: key, Valid: true}
	}
	id, inserted, err := b.exec.Insert(context.Background(), p)
	require.NoError(t, err)
	require.True(t, inserted)
	return id
}

// claim claims with the bundle's key cursor, moving it as Store does.
func (b *suiteBundle) claim(t *testing.T, p ClaimParams) []Row {
	t.Helper()
	res, err := b.exec.Claim(context.Background(), &claimRowsParams{ClaimParams: p, Cursor: b.cursor})
	require.NoError(t, err)
	if res.NextCursor.Valid {
		b.cursor = res.NextCursor.String
	}
	for i := 1; i < len(res.Rows); i++ {
		require.Less(t, res.Rows[i-1].ID, res.Rows[i].ID, "claimed rows in id order")
	}
	return res.Rows
}

func (b *suiteBundle) claimIDs(t *testing.T, owner string, limit int) []int64 {
	t.Helper()
	var ids []int64
	for _, r := range b.claim(t, ClaimParams{Owner: owner, Limit: limit}) {
		ids = append(ids, r.ID)
	}
	return ids
}

// suiteRow is what a row holds beyond what the executor reads back.
type suiteRow struct {
	status    Status
	attempts  int
	lastError sql.NullString
	owner     sql.NullString
}

// row reads row id with SQL every database takes (the id is written in
// the statement, so no placeholder).
func (b *suiteBundle) row(t *testing.T, id int64) suiteRow {
	t.Helper()
	var r suiteRow
	var status string
	q := fmt.Sprintf("SELECT status, attempts, last_error, owner FROM %s WHERE id = %d", b.table, id)
	require.NoError(t, b.db.SQL.QueryRow(q).Scan(&status, &r.attempts, &r.lastError, &r.owner))
	r.status = Status(status)
	return r
}

func (b *suiteBundle) markDone(t *testing.T, owner string, done ...Done) int64 {
	t.Helper()
	n, err := b.exec.MarkDone(context.Background(), &markDoneParams{Owner: owner, Done: done})
	require.NoError(t, err)
	return n
}

func (b *suiteBundle) markFailed(t *testing.T, owner string, failures ...Failure) int64 {
	t.Helper()
	n, err := b.exec.MarkFailed(context.Background(), &markFailedParams{Owner: owner, Failures: failures})
	require.NoError(t, err)
	return n
}

// everyLease is a requeue age that every lease is older than: "started
// before a second from now" on the database clock, so that a lease taken
// in the same clock tick (SQLite keeps milliseconds) counts too.
const everyLease = -time.Second

func suiteInsert(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	id := b.insert(t, "a", "")
	require.Positive(t, id)
	again, inserted, err := b.exec.Insert(ctx, &insertParams{IdempotencyKey: "a", Subject: "events.other", Payload: []byte("other"), Headers: "{}"})
	require.NoError(t, err, "a known key is no error")
	require.False(t, inserted)
	require.Zero(t, again)
	st, ok, err := b.exec.RowStatus(ctx, &rowStatusParams{ID: id})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, StatusPending, st)
	_, ok, err = b.exec.RowStatus(ctx, &rowStatusParams{ID: id + 1000})
	require.NoError(t, err)
	require.False(t, ok, "no such row")

	rows := b.claim(t, ClaimParams{Owner: "r", Limit: 10})
	require.Len(t, rows, 1, "the second insert wrote nothing")
	r := rows[0]
	require.Equal(t, "a", r.IdempotencyKey)
	require.Equal(t, "events.a", r.Subject)
	require.Equal(t, []byte("a"), r.Payload)
	require.Equal(t, int64(1), r.PayloadSize)
	require.JSONEq(t, "{}", string(r.Headers))
	require.False(t, r.OrderingKey.Valid)
	require.Equal(t, 1, r.Attempt)
	require.False(t, r.CreatedAt.IsZero())
	require.False(t, r.ClaimedAt.Before(r.CreatedAt), "claimed_at %s before created_at %s", r.ClaimedAt, r.CreatedAt)
	require.Equal(t, r.ClaimedAt, r.FirstClaimedAt, "first claim")
}

// Rows without a key and the first unsettled row of each key, in id order;
// a row behind its key's head waits until the head is settled.
func suiteClaimHeads(t *testing.T, b *suiteBundle) {
	a1, b1 := b.insert(t, "a1", "a"), b.insert(t, "b1", "b")
	n1, a2 := b.insert(t, "n1", ""), b.insert(t, "a2", "a")
	n2, b2 := b.insert(t, "n2", ""), b.insert(t, "b2", "b")

	require.Equal(t, []int64{a1, b1, n1, n2}, b.claimIDs(t, "r", 10))
	require.Empty(t, b.claimIDs(t, "r", 10), "a2 and b2 wait behind their in-flight heads")

	require.Equal(t, int64(1), b.markDone(t, "r", Done{ID: a1, Attempt: 1, Stream: "S", Seq: 1}))
	require.Equal(t, []int64{a2}, b.claimIDs(t, "r", 10), "a's next row once its head is done")

	// A failed head (retried later) still holds its key back.
	require.Equal(t, int64(1), b.markFailed(t, "r", Failure{ID: b1, Attempt: 1, Err: "x", Backoff: time.Hour}))
	require.Empty(t, b.claimIDs(t, "r", 10), "b2 waits behind b1, failed")
	// A dead letter does not.
	require.Zero(t, b.markFailed(t, "r", Failure{ID: b1, Attempt: 1, Err: "x", Permanent: true}), "b1 is failed, not in flight: the mark is fenced")
	_, err := b.exec.Retry(context.Background(), &retryParams{From: StatusFailed, IDs: []int64{b1}})
	require.NoError(t, err)
	require.Equal(t, []int64{b1}, b.claimIDs(t, "r", 10))
	require.Equal(t, int64(1), b.markFailed(t, "r", Failure{ID: b1, Attempt: 2, Err: "x", Permanent: true}))
	require.Equal(t, []int64{b2}, b.claimIDs(t, "r", 10), "b2 once b1 is a dead letter")
}

// When more keys have a claimable head than a claim takes, successive
// claims take the keys in turn, not the first key again.
func suiteClaimKeysInTurn(t *testing.T, b *suiteBundle) {
	keys := []string{"k1", "k2", "k3"}
	head := map[int64]string{}
	for _, k := range keys {
		head[b.insert(t, k+"-1", k)] = k
		b.insert(t, k+"-2", k)
	}
	var order []string
	for range len(keys) {
		rows := b.claim(t, ClaimParams{Owner: "r", Limit: 1})
		require.Len(t, rows, 1)
		r := rows[0]
		order = append(order, r.OrderingKey.String)
		require.Equal(t, head[r.ID], r.OrderingKey.String, "the head of its key")
		// Back to claimable at once: the key keeps a claimable head.
		require.Equal(t, int64(1), b.markFailed(t, "r", Failure{ID: r.ID, Attempt: r.Attempt, Err: "again"}))
	}
	require.Equal(t, keys, order)
}

// The claim takes rows in id order while they fit in MaxBytes (payload and
// headers as the database counts them), and the first one whatever its
// size.
func suiteClaimBytes(t *testing.T, b *suiteBundle) {
	big := strings.Repeat("x", 1000)
	var ids []int64
	for i := range 4 {
		id, inserted, err := b.exec.Insert(context.Background(), &insertParams{IdempotencyKey: fmt.Sprint("big", i),
			Subject: "events.big", Payload: []byte(big), Headers: "{}"})
		require.NoError(t, err)
		require.True(t, inserted)
		ids = append(ids, id)
	}
	// Headers "{}" count a few bytes on every database, far below 250.
	rows := b.claim(t, ClaimParams{Owner: "r", Limit: 10, MaxBytes: 2500})
	require.Len(t, rows, 2, "two rows of 1,000 bytes fit in 2,500, three do not")
	require.Equal(t, ids[:2], []int64{rows[0].ID, rows[1].ID})
	rows = b.claim(t, ClaimParams{Owner: "r", Limit: 10, MaxBytes: 10})
	require.Len(t, rows, 1, "the first row is taken whatever its size")
	require.Equal(t, ids[2], rows[0].ID)
	rows = b.claim(t, ClaimParams{Owner: "r", Limit: 10})
	require.Len(t, rows, 1, "no bound")
	require.Equal(t, ids[3], rows[0].ID)
}

// A payload longer than MaxPayload is not read: the row comes with its
// length.
func suiteClaimPayload(t *testing.T, b *suiteBundle) {
	long := b.insert(t, strings.Repeat("l", 20), "")
	short := b.insert(t, "short", "")
	rows := b.claim(t, ClaimParams{Owner: "r", Limit: 10, MaxPayload: 10})
	require.Len(t, rows, 2)
	require.Equal(t, long, rows[0].ID)
	require.True(t, rows[0].PayloadLeftOut)
	require.Nil(t, rows[0].Payload)
	require.Equal(t, int64(20), rows[0].PayloadSize)
	require.Equal(t, short, rows[1].ID)
	require.False(t, rows[1].PayloadLeftOut)
	require.Equal(t, []byte("short"), rows[1].Payload)
}

// Claims of several relays at once never lease a row twice, and together
// take every row.
func suiteConcurrentClaims(t *testing.T, b *suiteBundle) {
	const n, relays = 60, 4
	for i := range n {
		key := ""
		if i%3 == 0 {
			key = fmt.Sprint("k", i%5)
		}
		b.insert(t, fmt.Sprint("row", i), key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[int64]string{}
	all := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	}
	var wg sync.WaitGroup
	errs := make(chan error, relays)
	for r := range relays {
		owner := fmt.Sprint("relay-", r)
		wg.Go(func() {
			for !all() {
				res, err := b.exec.Claim(ctx, &claimRowsParams{ClaimParams: ClaimParams{Owner: owner, Limit: 5}})
				if err != nil {
					errs <- err
					return
				}
				var done []Done
				mu.Lock()
				for _, row := range res.Rows {
					if prev, dup := seen[row.ID]; dup {
						mu.Unlock()
						errs <- fmt.Errorf("row %d leased to %s and %s", row.ID, prev, owner)
						return
					}
					seen[row.ID] = owner
					done = append(done, Done{ID: row.ID, Attempt: row.Attempt, Stream: "S"})
				}
				mu.Unlock()
				if _, err := b.exec.MarkDone(ctx, &markDoneParams{Owner: owner, Done: done}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, n, "every row claimed once")
}

// A mark counts only for the owner and attempt of the current lease, and
// only while the row is in flight.
func suiteFencing(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	id := b.insert(t, "a", "")
	require.Equal(t, []int64{id}, b.claimIDs(t, "r1", 10))
	n, err := b.exec.Requeue(ctx, &requeueParams{OlderThan: everyLease})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	rows := b.claim(t, ClaimParams{Owner: "r2", Limit: 10})
	require.Len(t, rows, 1)
	require.Equal(t, 2, rows[0].Attempt)

	require.Zero(t, b.markDone(t, "r1", Done{ID: id, Attempt: 1, Stream: "S", Seq: 7}), "the stale lease's owner and attempt")
	require.Zero(t, b.markDone(t, "r1", Done{ID: id, Attempt: 2, Stream: "S", Seq: 7}), "the stale owner")
	require.Zero(t, b.markDone(t, "r2", Done{ID: id, Attempt: 1, Stream: "S", Seq: 7}), "the stale attempt")
	require.Zero(t, b.markFailed(t, "r1", Failure{ID: id, Attempt: 1, Err: "late", Permanent: true}))
	require.Equal(t, StatusInFlight, b.row(t, id).status)

	require.Equal(t, int64(1), b.markDone(t, "r2", Done{ID: id, Attempt: 2, Stream: "S", Seq: 7}))
	r := b.row(t, id)
	require.Equal(t, StatusDone, r.status)
	require.False(t, r.owner.Valid, "owner cleared")
	stream, err := b.exec.RelayedStream(ctx, &relayedStreamParams{Subject: "events.a"})
	require.NoError(t, err)
	require.Equal(t, "S", stream)
	stream, err = b.exec.RelayedStream(ctx, &relayedStreamParams{Subject: "events.none"})
	require.NoError(t, err)
	require.Empty(t, stream)
	require.Zero(t, b.markDone(t, "r2", Done{ID: id, Attempt: 2, Stream: "S", Seq: 7}), "done already")

	// A batch with a repeated row counts it once.
	id2 := b.insert(t, "b", "")
	rows = b.claim(t, ClaimParams{Owner: "r2", Limit: 10})
	require.Len(t, rows, 1)
	require.Equal(t, int64(1), b.markDone(t, "r2", Done{ID: id2, Attempt: 1, Stream: "S", Seq: 8}, Done{ID: id2, Attempt: 1, Stream: "S", Seq: 8}))
}

// A mark that waits for a row another transaction is changing is checked
// against the row as that transaction leaves it: when the lease was taken
// over meanwhile (here by another relay, as its in-flight recovery and
// claim would), the mark does not land, although the row was in the
// mark's lease when the mark began.
func suiteFencingWhileWaiting(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	marks := []struct {
		name string
		mark func(id int64) (int64, error)
	}{
		{"done", func(id int64) (int64, error) {
			return b.exec.MarkDone(ctx, &markDoneParams{Owner: "r1", Done: []Done{{ID: id, Attempt: 1, Stream: "S", Seq: 1}}})
		}},
		{"deleted", func(id int64) (int64, error) {
			return b.exec.MarkDone(ctx, &markDoneParams{Owner: "r1", Done: []Done{{ID: id, Attempt: 1}}, Delete: true})
		}},
		{"failed", func(id int64) (int64, error) {
			return b.exec.MarkFailed(ctx, &markFailedParams{Owner: "r1", Failures: []Failure{{ID: id, Attempt: 1, Err: "late", Permanent: true}}})
		}},
	}
	for _, m := range marks {
		id := b.insert(t, m.name, "")
		require.Equal(t, []int64{id}, b.claimIDs(t, "r1", 10))
		takeOver, err := b.db.SQL.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = takeOver.Rollback() }() // when the test fails before the commit
		_, err = takeOver.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET owner = 'r2', attempts = attempts + 1 WHERE id = %d", b.table, id))
		require.NoError(t, err)

		marked := make(chan error, 1)
		var n int64
		go func() {
			var err error
			n, err = m.mark(id)
			marked <- err
		}()
		suiteAwaitLockWait(t, b)
		require.NoError(t, takeOver.Commit())
		require.NoError(t, <-marked)
		require.Zero(t, n, "the %s mark of r1's lease after r2 took it over", m.name)
		r := b.row(t, id)
		require.Equal(t, StatusInFlight, r.status, "the %s mark", m.name)
		require.Equal(t, 2, r.attempts, "the %s mark", m.name)
		require.Equal(t, "r2", r.owner.String, "the %s mark", m.name)
	}
}

// suiteLockWaits counts the statements on the table named by the argument
// that wait for a row lock. MariaDB 10.11 left the waiting mark out of
// information_schema.innodb_trx in this test, so on MySQL it counts the
// other sessions' statements on the table that are running: while another
// transaction holds the row, the mark runs until it has waited for it.
var suiteLockWaits = map[Dialect]string{
	DialectPostgres: "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0",
	DialectMySQL:    "SELECT count(*) FROM information_schema.processlist WHERE command IN ('Query', 'Execute') AND id <> CONNECTION_ID() AND LOCATE(?, info) > 0",
}

// suiteAwaitLockWait returns once a statement on b's table waits for a row
// lock, and fails the test when none does within 10 seconds.
func suiteAwaitLockWait(t *testing.T, b *suiteBundle) {
	t.Helper()
	query, ok := suiteLockWaits[b.driver.dialect()]
	require.True(t, ok, "suiteLockWaits has no statement for %s", b.driver.dialect())
	require.Eventually(t, func() bool {
		var n int
		err := b.db.SQL.QueryRow(query, b.table.String()).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 10*time.Millisecond, "a statement waits for a row lock on %s", b.table)
}

func suiteMarkDoneDeletes(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	id := b.insert(t, "a", "")
	require.Equal(t, []int64{id}, b.claimIDs(t, "r", 10))
	n, err := b.exec.MarkDone(ctx, &markDoneParams{Owner: "other", Done: []Done{{ID: id, Attempt: 1}}, Delete: true})
	require.NoError(t, err)
	require.Zero(t, n, "fenced")
	n, err = b.exec.MarkDone(ctx, &markDoneParams{Owner: "r", Done: []Done{{ID: id, Attempt: 1}}, Delete: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	_, ok, err := b.exec.RowStatus(ctx, &rowStatusParams{ID: id})
	require.NoError(t, err)
	require.False(t, ok, "deleted")
}

// A failure makes the row failed (claimable after its backoff),
// permanent_failed, or gives the attempt back: pending when released
// (Refund), failed with its error when held back (Refund and Held).
func suiteMarkFailed(t *testing.T, b *suiteBundle) {
	retry, dead := b.insert(t, "retry", ""), b.insert(t, "dead", "")
	released, held := b.insert(t, "released", ""), b.insert(t, "held", "")
	now := b.insert(t, "now", "")
	require.Len(t, b.claimIDs(t, "r", 10), 5)
	require.Equal(t, int64(5), b.markFailed(t, "r",
		Failure{ID: retry, Attempt: 1, Err: "nats: timeout", Backoff: time.Hour},
		Failure{ID: dead, Attempt: 1, Err: "too big", Permanent: true},
		Failure{ID: released, Attempt: 1, Err: "shutdown", Refund: true},
		Failure{ID: held, Attempt: 1, Err: "stream unsafe", Refund: true, Held: true},
		Failure{ID: now, Attempt: 1, Err: "line\nbreak"}))

	for id, want := range map[int64]suiteRow{
		retry:    {status: StatusFailed, attempts: 1, lastError: sql.NullString{String: "nats: timeout", Valid: true}},
		dead:     {status: StatusPermanentFailed, attempts: 1, lastError: sql.NullString{String: "too big", Valid: true}},
		released: {status: StatusPending, attempts: 0, lastError: sql.NullString{String: "shutdown", Valid: true}},
		held:     {status: StatusFailed, attempts: 0, lastError: sql.NullString{String: "stream unsafe", Valid: true}},
		now:      {status: StatusFailed, attempts: 1, lastError: sql.NullString{String: SanitizeError("line\nbreak"), Valid: true}},
	} {
		require.Equal(t, want, b.row(t, id), "row %d", id)
	}
	require.Equal(t, []int64{released, held, now}, b.claimIDs(t, "r", 10), "all but the one waiting out its backoff and the dead letter")
}

// Leases older than the age become failed, owner cleared, attempts kept,
// claimable at once; younger ones stay.
func suiteRequeue(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	x, y := b.insert(t, "x", "k"), b.insert(t, "y", "")
	require.Equal(t, []int64{x, y}, b.claimIDs(t, "r", 10))
	n, err := b.exec.Requeue(ctx, &requeueParams{OlderThan: time.Hour})
	require.NoError(t, err)
	require.Zero(t, n, "leases younger than an hour")
	n, err = b.exec.Requeue(ctx, &requeueParams{OlderThan: everyLease})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, id := range []int64{x, y} {
		require.Equal(t, suiteRow{status: StatusFailed, attempts: 1, lastError: sql.NullString{String: "requeued after inflight timeout", Valid: true}}, b.row(t, id))
	}
	rows := b.claim(t, ClaimParams{Owner: "r2", Limit: 10})
	require.Len(t, rows, 2, "claimable at once")
	require.Equal(t, 2, rows[0].Attempt)
	require.True(t, rows[0].FirstClaimedAt.Before(rows[0].ClaimedAt) || rows[0].FirstClaimedAt.Equal(rows[0].ClaimedAt))
	n, err = b.exec.Requeue(ctx, &requeueParams{OlderThan: time.Hour})
	require.NoError(t, err)
	require.Zero(t, n)
}

// Retry gives dead letters a fresh start and makes failed rows claimable
// now; rows of another status and unknown ids are left alone.
func suiteRetry(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	dead1, dead2 := b.insert(t, "dead1", ""), b.insert(t, "dead2", "")
	failed1, failed2 := b.insert(t, "failed1", ""), b.insert(t, "failed2", "")
	pending := b.insert(t, "pending", "")
	require.Len(t, b.claimIDs(t, "r", 4), 4)
	require.Equal(t, int64(4), b.markFailed(t, "r",
		Failure{ID: dead1, Attempt: 1, Err: "x", Permanent: true}, Failure{ID: dead2, Attempt: 1, Err: "x", Permanent: true},
		Failure{ID: failed1, Attempt: 1, Err: "x", Backoff: time.Hour}, Failure{ID: failed2, Attempt: 1, Err: "x", Backoff: time.Hour}))

	list, err := b.exec.Retryable(ctx)
	require.NoError(t, err)
	require.Equal(t, []retryableRow{
		{ID: dead1, Subject: "events.dead1", Status: StatusPermanentFailed}, {ID: dead2, Subject: "events.dead2", Status: StatusPermanentFailed},
		{ID: failed1, Subject: "events.failed1", Status: StatusFailed}, {ID: failed2, Subject: "events.failed2", Status: StatusFailed},
	}, list)

	retried := func(p *retryParams) int {
		t.Helper()
		n, err := b.exec.Retry(ctx, p)
		require.NoError(t, err)
		return n
	}
	require.Zero(t, retried(&retryParams{From: StatusPermanentFailed}), "no ids")
	require.Zero(t, retried(&retryParams{From: StatusPermanentFailed, IDs: []int64{failed1, pending, 999999}}), "not dead letters")
	require.Zero(t, retried(&retryParams{From: StatusFailed, IDs: []int64{dead1}}), "not failed")
	require.Equal(t, 1, retried(&retryParams{From: StatusPermanentFailed, IDs: []int64{dead1}}))
	require.Equal(t, suiteRow{status: StatusPending, attempts: 0, lastError: sql.NullString{String: "x", Valid: true}}, b.row(t, dead1), "fresh start, last error kept")
	require.Equal(t, 1, retried(&retryParams{From: StatusFailed, IDs: []int64{failed1}}))
	require.Equal(t, []int64{dead1, failed1, pending}, b.claimIDs(t, "r", 10))
	require.Equal(t, 2, b.row(t, failed1).attempts, "attempts kept, and counted again")

	require.Equal(t, 1, retried(&retryParams{From: StatusPermanentFailed, All: true}))
	require.Equal(t, 1, retried(&retryParams{From: StatusFailed, All: true}))
	require.Equal(t, []int64{dead2, failed2}, b.claimIDs(t, "r", 10))
}

func suiteStatus(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	ids := []int64{b.insert(t, "a", ""), b.insert(t, "b", ""), b.insert(t, "c", ""), b.insert(t, "d", ""), b.insert(t, "e", "")}
	require.Len(t, b.claimIDs(t, "r", 4), 4)
	require.Equal(t, int64(1), b.markDone(t, "r", Done{ID: ids[0], Attempt: 1, Stream: "S", Seq: 1}))
	require.Equal(t, int64(2), b.markFailed(t, "r",
		Failure{ID: ids[1], Attempt: 1, Err: "first", Backoff: time.Hour},
		Failure{ID: ids[2], Attempt: 1, Err: "dead", Permanent: true}))

	counts, err := b.exec.CountByStatus(ctx)
	require.NoError(t, err)
	require.False(t, counts.Now.IsZero(), "the database clock")
	got := map[Status]int64{}
	for _, c := range counts.Rows {
		got[c.Status] = c.Count
		require.False(t, c.Oldest.IsZero(), "oldest %s", c.Status)
		require.False(t, c.Oldest.After(counts.Now), "oldest %s after now", c.Status)
	}
	require.Equal(t, map[Status]int64{StatusDone: 1, StatusFailed: 1, StatusPermanentFailed: 1, StatusInFlight: 1, StatusPending: 1}, got)

	oldest, ok, err := b.exec.OldestFailed(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ids[1], oldest.ID)
	require.Equal(t, "events.b", oldest.Subject)
	require.Equal(t, "first", oldest.LastError)
	require.Equal(t, StatusFailed, oldest.Status)
	require.GreaterOrEqual(t, oldest.Age, time.Duration(0))

	recent, err := b.exec.RecentErrors(ctx, &recentErrorsParams{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []RowError{{ID: ids[2], Status: StatusPermanentFailed, Attempts: 1, LastError: "dead"}}, recent, "newest first")
	recent, err = b.exec.RecentErrors(ctx, &recentErrorsParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, recent, 2)

	require.Equal(t, int64(1), b.markFailed(t, "r", Failure{ID: ids[3], Attempt: 1, Err: "x", Permanent: true}))
	_, err = b.exec.Retry(ctx, &retryParams{From: StatusFailed, All: true})
	require.NoError(t, err)
	require.Len(t, b.claimIDs(t, "r", 10), 2)
	require.Equal(t, int64(2), b.markDone(t, "r", Done{ID: ids[1], Attempt: 2}, Done{ID: ids[4], Attempt: 1}))
	_, ok, err = b.exec.OldestFailed(ctx)
	require.NoError(t, err)
	require.False(t, ok, "none failed")
}

// Stalled: a claimable row (pending or failed, available, first of its
// key) available for longer than the age; not a row behind its key's head
// nor one waiting out its backoff.
func suiteStalled(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	stalled := func(age time.Duration) bool {
		t.Helper()
		s, err := b.exec.Stalled(ctx, &stalledParams{Age: age})
		require.NoError(t, err)
		return s
	}
	require.False(t, stalled(everyLease), "empty table")
	head := b.insert(t, "head", "k")
	b.insert(t, "behind", "k")
	require.False(t, stalled(time.Hour), "available for less than an hour")
	require.True(t, stalled(everyLease))
	require.Equal(t, []int64{head}, b.claimIDs(t, "r", 10))
	require.False(t, stalled(everyLease), "the only pending row waits behind its key's head")
	require.Equal(t, int64(1), b.markFailed(t, "r", Failure{ID: head, Attempt: 1, Err: "x", Backoff: time.Hour}))
	require.False(t, stalled(everyLease), "the head waits out its backoff")
}

// MayClaim, the probe before a claim: never false while a row is claimable
// (it may be true when none is: MySQL's ignores the ordering keys), false
// with nothing pending and every failed row waiting out its backoff.
func suiteMayClaim(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	may := func() bool {
		t.Helper()
		ok, err := b.exec.MayClaim(ctx)
		require.NoError(t, err)
		return ok
	}
	require.False(t, may(), "empty table")
	done := b.insert(t, "done", "")
	require.True(t, may(), "a pending row")
	require.Equal(t, []int64{done}, b.claimIDs(t, "r", 10))
	require.False(t, may(), "the only row is in flight")
	require.Equal(t, int64(1), b.markDone(t, "r", Done{ID: done, Attempt: 1, Stream: "S", Seq: 1}))
	require.False(t, may(), "the only row is done")
	failed := b.insert(t, "failed", "k")
	require.Equal(t, []int64{failed}, b.claimIDs(t, "r", 10))
	require.Equal(t, int64(1), b.markFailed(t, "r", Failure{ID: failed, Attempt: 1, Err: "x", Backoff: time.Hour}))
	require.False(t, may(), "the failed row waits out its backoff")
	again := b.insert(t, "again", "")
	require.Equal(t, []int64{again}, b.claimIDs(t, "r", 10))
	require.False(t, may(), "one failed row waits out its backoff, the other is in flight")
	require.Equal(t, int64(1), b.markFailed(t, "r", Failure{ID: again, Attempt: 1, Err: "x"}))
	require.True(t, may(), "a failed row is past its backoff")
}

func suitePurge(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	var done []Done
	for i := range 3 {
		id := b.insert(t, fmt.Sprint("r", i), "")
		done = append(done, Done{ID: id, Attempt: 1, Stream: "S", Seq: uint64(i + 1)})
	}
	pending := b.insert(t, "pending", "")
	require.Len(t, b.claimIDs(t, "r", 3), 3)
	require.Equal(t, int64(3), b.markDone(t, "r", done...))
	purged := func(age time.Duration, limit int) int {
		t.Helper()
		n, err := b.exec.Purge(ctx, &purgeParams{OlderThan: age, Limit: limit})
		require.NoError(t, err)
		return n
	}
	require.Zero(t, purged(time.Hour, 10), "relayed less than an hour ago")
	require.Equal(t, 2, purged(everyLease, 2), "at most the limit")
	require.Equal(t, 1, purged(everyLease, 2))
	require.Zero(t, purged(everyLease, 2))
	st, ok, err := b.exec.RowStatus(ctx, &rowStatusParams{ID: pending})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, StatusPending, st)
}

// A driver that says SupportsNotify wakes a listener on insert, with the
// opt-in trigger (NotifyTriggerSQL).
func suiteNotify(t *testing.T, b *suiteBundle) {
	if !b.driver.capabilities().SupportsNotify {
		return
	}
	// The trigger is an opt-in (migration 00004 dropped it).
	optIn, err := NotifyTriggerSQL(b.table.String())
	require.NoError(t, err)
	_, err = b.db.SQL.ExecContext(context.Background(), optIn)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	woken := make(chan struct{}, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		wake := func() {
			select {
			case woken <- struct{}{}:
			default:
			}
		}
		ListenPostgres(ctx, b.db, b.table.String(), wake, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() { cancel(); <-stopped })
	wait := func(what string) {
		t.Helper()
		select {
		case <-woken:
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake %s within 10s", what)
		}
	}
	wait("once listening") // the listener wakes the relay once it listens
	b.insert(t, "a", "")
	wait("after an insert")
}

// A table never migrated, a table missing columns and (where table names
// take a schema the relay does not create) a missing schema are told
// apart, by the driver and by classify, which asks every driver.
func suiteClassifyMissing(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	probeOf := func(table string) error {
		t.Helper()
		tn, err := ParseTableName(table)
		require.NoError(t, err)
		ex, err := b.driver.executor(b.db, tn)
		require.NoError(t, err)
		err = ex.Probe(ctx)
		require.Error(t, err)
		return err
	}
	qualified := func(name string) string {
		if b.table.schema == "" {
			return name
		}
		return b.table.schema + "." + name
	}
	requireClass(t, b.driver, errorUndefinedTable, probeOf(qualified("never_migrated")))

	_, err := b.db.SQL.ExecContext(ctx, "CREATE TABLE "+qualified("partial")+" (id INTEGER)")
	require.NoError(t, err)
	requireClass(t, b.driver, errorUndefinedColumn, probeOf(qualified("partial")))

	if b.table.schema != "" {
		_, err := Migrate(ctx, b.db, "nosuch_"+testdb.RandomHex(4)+".outbox")
		require.Error(t, err)
		requireClass(t, b.driver, errorUndefinedSchema, err)
	}
}

// A write in a read-only transaction.
func suiteClassifyReadOnly(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	id := b.insert(t, "a", "")
	tx, err := b.db.SQL.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET attempts = attempts + 1 WHERE id = %d", b.table, id))
	require.Error(t, err)
	requireClass(t, b.driver, errorReadOnly, err)
}

// A user the server does not know, with a password: refused at connect.
// SQLite has no users.
func suiteClassifyCredentials(t *testing.T, b *suiteBundle) {
	if b.driver.dialect() == DialectSQLite {
		return
	}
	u, err := url.Parse(b.url)
	require.NoError(t, err)
	u.User = url.UserPassword("bridge_nobody_"+testdb.RandomHex(4), "not-the-password")
	db, err := Open(context.Background(), u.String())
	if err == nil {
		defer db.Close()
		err = db.SQL.PingContext(context.Background())
	}
	require.Error(t, err)
	requireClass(t, b.driver, errorCredentials, err)
}

// suiteLockWait holds a short lock wait for the sessions of this database.
var suiteLockWait = map[Dialect]string{
	DialectPostgres: "SET LOCAL lock_timeout = '100ms'",
	DialectMySQL:    "SET SESSION innodb_lock_wait_timeout = 1",
}

// A row locked by one transaction, which another waits for in vain.
func suiteClassifyLockTimeout(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	id := b.insert(t, "a", "")
	holder := suiteLock(t, b, id)
	defer func() { _ = holder.Rollback() }()
	waiter, err := b.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = waiter.Rollback() }()
	set, ok := suiteLockWait[b.driver.dialect()]
	require.True(t, ok, "suiteLockWait has no statement for %s", b.driver.dialect())
	_, err = waiter.ExecContext(ctx, set)
	require.NoError(t, err)
	_, err = waiter.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET attempts = attempts + 1 WHERE id = %d", b.table, id))
	require.Error(t, err)
	requireClass(t, b.driver, errorLockTimeout, err)
}

// Two transactions that each lock a row and then wait for the other's.
func suiteClassifyDeadlock(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	x, y := b.insert(t, "x", ""), b.insert(t, "y", "")
	first, second := suiteLock(t, b, x), suiteLock(t, b, y)
	defer func() { _, _ = first.Rollback(), second.Rollback() }()
	lock := func(tx *sql.Tx, id int64) error {
		_, err := tx.ExecContext(ctx, fmt.Sprintf("SELECT id FROM %s WHERE id = %d FOR UPDATE", b.table, id))
		if err != nil {
			_ = tx.Rollback() // frees the other
		}
		return err
	}
	waited := make(chan error, 1)
	go func() { waited <- lock(first, y) }()
	err := lock(second, x)
	errs := []error{err, <-waited}
	i := slices.IndexFunc(errs, func(err error) bool { return err != nil })
	require.GreaterOrEqual(t, i, 0, "one of the two is chosen as the deadlock's victim")
	requireClass(t, b.driver, errorConflict, errs[i])
}

// suiteLock begins a transaction that holds a lock on row id.
func suiteLock(t *testing.T, b *suiteBundle, id int64) *sql.Tx {
	t.Helper()
	tx, err := b.db.SQL.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	_, err = tx.Exec(fmt.Sprintf("SELECT id FROM %s WHERE id = %d FOR UPDATE", b.table, id))
	require.NoError(t, err)
	return tx
}

// requireClass checks that d, and classify over every driver, read err as
// want.
func requireClass(t *testing.T, d driver, want errorClass, err error) {
	t.Helper()
	require.Equal(t, want, d.classify(err), "%s classifies %v", d.dialect(), err)
	require.Equal(t, want, classify(err), "classify %v", err)
	for _, other := range drivers {
		if other.dialect() != d.dialect() {
			require.Equal(t, errorOther, other.classify(err), "%s does not claim an error of %s", other.dialect(), d.dialect())
		}
	}
	require.Equal(t, errorOther, classify(fmt.Errorf("wrapped: %w", errors.New(err.Error()))), "the class comes from the error's type, not its text")
}
