package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"
)

// mysqlDialect targets MySQL 8.0.16+ and MariaDB 10.6+ (InnoDB, FOR UPDATE
// SKIP LOCKED, enforced CHECK constraints, expression defaults, JSON_TABLE).
// Neither has UPDATE … RETURNING, so a claim is a short READ COMMITTED
// transaction of four statements (see claim), and Enqueue reads the new id
// from the INSERT's result. Marks are one UPDATE per batch whose per-row
// values come from CASE id WHEN … arms.
//
// Every statement that locks rows finds them by primary key (FORCE INDEX
// (PRIMARY)); rows are chosen beforehand by non-locking reads. An UPDATE
// driven by a secondary index locks every index record it scans, including
// rows other relays are changing at that moment: it waits for them and can
// deadlock with them.
//
// Times are DATETIME(6) in UTC from UTC_TIMESTAMP(6), the database clock,
// whatever the session time zone.
type mysqlDialect struct{}

// mysqlNow is the database clock, UTC with microseconds.
const mysqlNow = `UTC_TIMESTAMP(6)`

// mysqlKeyMax is the longest idempotency or ordering key the MySQL table
// holds, in bytes (VARBINARY(255), see migrations/mysql).
const mysqlKeyMax = 255

// mysqlClaimSep separates the statements of the claim transaction in
// statements.claim.
const mysqlClaimSep = ";\n"

// mysqlBatchMax bounds the rows of one mark statement (each row takes up to
// 11 placeholders; a statement takes at most 65,535).
const mysqlBatchMax = 500

// mysqlOverfetch is how many candidates a claim reads per row it wants:
// with several relays, the first candidates may be locked by another
// relay's claim, and SKIP LOCKED then takes the next ones.
const mysqlOverfetch = 2

// Markers that expand to a batch's placeholders (see mysqlExpand).
const (
	mysqlIDs  = "/*ids*/"  // ?, ?, …
	mysqlArms = "/*arms*/" // WHEN ? THEN ? WHEN ? THEN ? …
)

func (mysqlDialect) name() string         { return "mysql" }
func (mysqlDialect) goose() goose.Dialect { return goose.DialectMySQL }

// MySQL index names are per table (and at most 64 bytes), so they do not
// repeat the table name.
func (mysqlDialect) indexName(_ tableName, suffix string) string { return suffix + "_idx" }

func (mysqlDialect) sqlFor(t tableName) statements {
	T := t.String()
	fence := ` AND status = 'in_flight' AND owner = ?`
	return statements{
		// The claim transaction, run by claim one statement after another:
		//  1. candidates(limit, limit, limit, limit): the claimable rows, a
		//     non-locking read;
		//  2. lock(max payload, ids…, limit): those still claimable,
		//     locked, SKIP LOCKED, with what each would hold (mysqlRowSize);
		//  3. update(owner, ids…): the lease;
		//  4. read(max payload, ids…): the claimed rows.
		claim: strings.Join([]string{
			mysqlCandidates(t),
			`SELECT id, ` + mysqlRowSize + ` FROM ` + T + ` FORCE INDEX (PRIMARY)
WHERE id IN (` + mysqlIDs + `) AND status IN ('pending', 'failed') AND available_at <= ` + mysqlNow + `
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`,
			`UPDATE ` + T + ` FORCE INDEX (PRIMARY) SET status = 'in_flight', owner = ?, claimed_at = ` + mysqlNow + `,
	first_claimed_at = COALESCE(first_claimed_at, ` + mysqlNow + `), attempts = attempts + 1
WHERE id IN (` + mysqlIDs + `)`,
			`SELECT id, idempotency_key, subject, CASE WHEN LENGTH(payload) <= ? THEN payload END, headers, ordering_key,
	attempts, created_at, claimed_at, first_claimed_at, LENGTH(payload)
FROM ` + T + ` WHERE id IN (` + mysqlIDs + `) ORDER BY id`,
		}, mysqlClaimSep),
		// In-flight recovery, run by requeue one statement after another:
		// stale leases found by a non-locking read (olderThan, limit), locked
		// by primary key with the lease re-checked, SKIP LOCKED (ids…,
		// olderThan), then moved (ids…). An UPDATE that scanned inflight_idx
		// itself locked (and waited for) rows that other relays were claiming
		// or marking, and deadlocked with them; one that read the stale rows
		// in a derived table still took shared locks on inflight_idx on
		// MariaDB 10.11 and waited 50 s (innodb_lock_wait_timeout) behind a
		// relay frozen in the middle of a claim.
		requeue: strings.Join([]string{
			`SELECT id FROM ` + T + ` WHERE status = 'in_flight' AND claimed_at < ` + mysqlNow + ` - INTERVAL ? MICROSECOND
ORDER BY claimed_at LIMIT ?`,
			`SELECT id FROM ` + T + ` FORCE INDEX (PRIMARY)
WHERE id IN (` + mysqlIDs + `) AND status = 'in_flight' AND claimed_at < ` + mysqlNow + ` - INTERVAL ? MICROSECOND
FOR UPDATE SKIP LOCKED`,
			`UPDATE ` + T + ` FORCE INDEX (PRIMARY) SET status = 'failed', owner = NULL, available_at = ` + mysqlNow + `,
	last_error = 'requeued after inflight timeout'
WHERE id IN (` + mysqlIDs + `)`,
		}, mysqlClaimSep),
		stats:        `SELECT status, COUNT(*), MIN(created_at), ` + mysqlNow + ` FROM ` + T + ` GROUP BY status`,
		recentErrors: `SELECT id, status, attempts, last_error FROM ` + T + ` WHERE status IN ('failed', 'permanent_failed') ORDER BY id DESC LIMIT ?`,
		// ON DUPLICATE KEY UPDATE with no change: 1 row affected when
		// inserted, 0 when the key exists. Not INSERT IGNORE, which would also
		// turn other errors (a value too long, a bad JSON) into warnings.
		insert: `INSERT INTO ` + T + ` (idempotency_key, subject, payload, headers, ordering_key)
VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id`,
		probe: `SELECT ` + columnList + ` FROM ` + T + ` WHERE FALSE`,
		retryIDs: `UPDATE ` + T + ` o JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j ON o.id = j.id
SET ` + retrySet + mysqlNow + ` WHERE o.status = 'permanent_failed'`,
		retryAll: `UPDATE ` + T + ` SET ` + retrySet + mysqlNow + ` WHERE status = 'permanent_failed'`,
		retryFailedIDs: `UPDATE ` + T + ` o JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j ON o.id = j.id
SET o.available_at = ` + mysqlNow + ` WHERE o.status = 'failed'`,
		retryAllFailed: `UPDATE ` + T + ` SET available_at = ` + mysqlNow + ` WHERE status = 'failed'`,
		retryable:      `SELECT id, subject, status FROM ` + T + ` WHERE status IN ('failed', 'permanent_failed') ORDER BY id`,
		oldestFailed:   `SELECT id, subject, attempts, last_error, created_at, ` + mysqlNow + ` FROM ` + T + ` WHERE status = 'failed' ORDER BY id LIMIT 1`,
		stalled: `SELECT EXISTS (SELECT 1 FROM ` + T + ` o WHERE o.status IN ('pending', 'failed')
	AND o.available_at < ` + mysqlNow + ` - INTERVAL ? MICROSECOND
	AND NOT EXISTS (SELECT 1 FROM ` + T + ` e WHERE e.ordering_key = o.ordering_key AND e.id < o.id AND e.status IN ('pending', 'in_flight', 'failed')))`,
		purge: `DELETE FROM ` + T + ` WHERE status = 'done' AND relayed_at < ` + mysqlNow + ` - INTERVAL ? MICROSECOND LIMIT ?`,
		// Parameters: stream arms, stream_seq arms, ids, attempt arms, owner.
		markDone: `UPDATE ` + T + ` FORCE INDEX (PRIMARY) SET status = 'done', relayed_at = ` + mysqlNow + `, owner = NULL, last_error = NULL,
	stream = CASE id ` + mysqlArms + ` END, stream_seq = CASE id ` + mysqlArms + ` END
WHERE id IN (` + mysqlIDs + `) AND attempts = CASE id ` + mysqlArms + ` END` + fence,
		// Parameters: ids, attempt arms, owner.
		deleteDone: `DELETE o FROM ` + T + ` o FORCE INDEX (PRIMARY)
WHERE id IN (` + mysqlIDs + `) AND attempts = CASE id ` + mysqlArms + ` END` + fence,
		// Parameters: status arms, last_error arms, delay arms (microseconds),
		// refund arms (0 or 1), ids, attempt arms, owner.
		markFailed: `UPDATE ` + T + ` FORCE INDEX (PRIMARY) SET status = CASE id ` + mysqlArms + ` END, last_error = CASE id ` + mysqlArms + ` END, owner = NULL,
	available_at = ` + mysqlNow + ` + INTERVAL (CASE id ` + mysqlArms + ` END) MICROSECOND,
	attempts = attempts - CASE id ` + mysqlArms + ` END
WHERE id IN (` + mysqlIDs + `) AND attempts = CASE id ` + mysqlArms + ` END` + fence,
	}
}

// mysqlRowSize is what a row would hold in the relay's memory (see Row.size):
// its payload when the claim reads it (not longer than the parameter) and
// its headers, as the server counts their bytes.
const mysqlRowSize = `CASE WHEN LENGTH(payload) <= ? THEN LENGTH(payload) ELSE 0 END + LENGTH(headers)`

// mysqlCandidates selects the claimable rows, a non-locking read: pending
// or failed and available, without ordering key or first of their key
// among its rows not done or permanent_failed (the head of the key).
// Parameters: mysqlCandidateArgs. Columns: id, ordering key, lap, ready
// (see readMySQLCandidates), in no particular order.
//
// It reads claimable_idx (status, ordering_key, id) only, and never rows
// that are blocked behind the head of their key nor relayed ones:
//   - rows without a key: one branch per status, each reading the index in
//     id order and stopping at its LIMIT (an IN over two statuses would
//     sort every claimable row);
//   - heads: a walk over the keys that have a pending or failed row, from
//     the key cursor on (lap 0) and then from the first key up to the
//     cursor (lap 1), at most LIMIT keys (one branch per status and lap,
//     GROUP BY in index order, so MariaDB stops at the LIMIT: a loose index
//     scan, one index dive per key, when keys are few and hold many rows, a
//     range scan reading one row per key when each holds one). The head of
//     each walked key is the least of its first pending, in_flight and
//     failed ids, three index dives; it is ready when it is pending or
//     failed and available. Every walked key is returned, ready or not, so
//     that the claim can move the cursor past a window of held-back keys.
//
// The first version asked NOT EXISTS (an earlier unsettled row of the
// key) per scanned row, as the PostgreSQL claim did then; MariaDB 10.11
// walked the primary key through every done row to answer it (0.7 s per
// claim with 200,000 done rows), and even with the index pinned, evaluating
// the dependent subquery for every blocked row took 100-300 ms per claim
// with 6,000 rows queued behind 56 keys. The second took MIN(id) per
// (status, key) over every key: a loose index scan that stayed cheap for
// few keys but read every key on every claim, 0.8 s per claim with 100,000
// keys. MariaDB cannot seek with a value of the outer query inside a
// subquery (no LATERAL; a correlated "key > w.k" scans the index from its
// start), so the walk is a window of keys rather than a recursive skip scan
// as on PostgreSQL and SQLite.
//
// The walk's status literals carry the column's collation: in a session
// whose connection collation is utf8mb4_general_ci (Go's MySQL driver's)
// MariaDB 10.11 no longer treats the status of "GROUP BY status, key" as a
// constant, sorts the walk in a temporary table and reads every key.
func mysqlCandidates(t tableName) string {
	T := t.String()
	claimable := mysqlDialect{}.indexName(t, "claimable")
	var branches []string
	for _, status := range []string{"pending", "failed"} {
		branches = append(branches, `(SELECT o.id, NULL AS k, 0 AS lap, 1 AS ready FROM `+T+` o FORCE INDEX (`+claimable+`)
	WHERE o.status = '`+status+`' AND o.ordering_key IS NULL AND o.available_at <= `+mysqlNow+`
	ORDER BY o.id LIMIT ?)`)
	}
	var walk []string
	for lap, after := range []string{">", "<="} {
		for _, status := range []string{"pending", "failed"} {
			walk = append(walk, `(SELECT e.ordering_key AS k, `+fmt.Sprint(lap)+` AS lap FROM `+T+` e FORCE INDEX (`+claimable+`)
				WHERE e.status = _utf8mb4'`+status+`' COLLATE utf8mb4_bin AND e.ordering_key `+after+` ?
				GROUP BY e.status, e.ordering_key ORDER BY e.status, e.ordering_key LIMIT ?)`)
		}
	}
	var first []string
	for _, status := range []string{"pending", "in_flight", "failed"} {
		first = append(first, `COALESCE((SELECT x.id FROM `+T+` x FORCE INDEX (`+claimable+`)
			WHERE x.status = '`+status+`' AND x.ordering_key = w.k ORDER BY x.id LIMIT 1), `+mysqlNoID+`)`)
	}
	branches = append(branches, `(SELECT h.id, h.k, h.lap,
		COALESCE(o.status IN ('pending', 'failed') AND o.available_at <= `+mysqlNow+`, 0) AS ready
	FROM (
		SELECT w.k, w.lap, LEAST(
			`+strings.Join(first, `,
			`)+`) AS id
		FROM (
			`+strings.Join(walk, `
			UNION ALL
			`)+`) w
		GROUP BY w.lap, w.k ORDER BY w.lap, w.k LIMIT ?) h
	LEFT JOIN `+T+` o FORCE INDEX (PRIMARY) ON o.id = h.id)`)
	return strings.Join(branches, `
UNION ALL
`)
}

// mysqlNoID stands for "no such row" in the LEAST of mysqlCandidates (a
// NULL would make LEAST NULL): the largest BIGINT, never an id in practice
// and never ready, since no row has it.
const mysqlNoID = "9223372036854775807"

// mysqlCandidateArgs are the parameters of mysqlCandidates, in the order
// they appear: want rows without key, want keys from the key cursor on.
func mysqlCandidateArgs(cursor string, want int) []any {
	args := []any{want, want}
	for range 4 {
		args = append(args, cursor, want)
	}
	return append(args, want)
}

// mysqlCandidateSet is what mysqlCandidates found.
type mysqlCandidateSet struct {
	ids    []int64       // the rows to lock, in id order (see readMySQLCandidates)
	walked []mysqlWalked // the keys walked, in walk order
}

// mysqlWalked is one key of the walk and its head.
type mysqlWalked struct {
	key   string
	lap   int
	head  int64
	ready bool
}

// readMySQLCandidates runs mysqlCandidates from cursor for a claim of
// limit rows and keeps, of what it finds, the ready heads of the first
// keys in walk order (at most limit) and the rows without key, at most
// want = limit × mysqlOverfetch rows in id order. Heads are taken in walk
// order, not by id: the head of a key that got a row only now has a larger
// id than the heads of keys around it that keep failing and coming back,
// and by id it would lose to them on every claim.
func readMySQLCandidates(ctx context.Context, tx *sql.Tx, query, cursor string, limit int) (mysqlCandidateSet, error) {
	var c mysqlCandidateSet
	want := limit * mysqlOverfetch
	rows, err := tx.QueryContext(ctx, query, mysqlCandidateArgs(cursor, want)...)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var key sql.NullString
		var lap int
		var ready bool
		if err := rows.Scan(&id, &key, &lap, &ready); err != nil {
			return c, err
		}
		switch {
		case key.Valid:
			c.walked = append(c.walked, mysqlWalked{key: key.String, lap: lap, head: id, ready: ready})
		case ready:
			c.ids = append(c.ids, id)
		}
	}
	if err := rows.Err(); err != nil {
		return c, err
	}
	slices.SortFunc(c.walked, func(a, b mysqlWalked) int {
		if a.lap != b.lap {
			return a.lap - b.lap
		}
		return strings.Compare(a.key, b.key) // VARBINARY: byte order
	})
	heads := 0
	for _, w := range c.walked {
		if w.ready && heads < limit {
			c.ids = append(c.ids, w.head)
			heads++
		}
	}
	slices.Sort(c.ids)
	c.ids = c.ids[:min(len(c.ids), want)]
	return c, nil
}

// nextCursor is where the claim after this one starts walking: just
// before the first walked key whose head was ready but not claimed (left
// out for rows with smaller ids, or taken by another relay meanwhile), so
// that it comes first next time; else after the last key walked, past the
// keys claimed and those held back (heads in flight or waiting out a
// backoff). A cursor moved past a ready key that was left out once kept
// such a key waiting as long as older heads around it kept failing
// (TestClaimGivesANewKeyItsTurnAmongRetryingKeys).
func (c mysqlCandidateSet) nextCursor(from string, claimed []Row) sql.NullString {
	taken := make(map[int64]bool, len(claimed))
	for _, r := range claimed {
		taken[r.ID] = true
	}
	next := sql.NullString{String: from, Valid: true}
	for _, w := range c.walked {
		if w.ready && !taken[w.head] {
			return next
		}
		next = sql.NullString{String: w.key, Valid: true}
	}
	return next
}

// claim leases up to limit rows to owner in one READ COMMITTED transaction:
//
//  1. candidates: a plain (non-locking) SELECT of the claimable rows,
//     ordering condition included (mysqlCandidates, readMySQLCandidates):
//     at most one row per ordering key, its first row not yet done or
//     permanent_failed.
//     A non-locking read sees the latest committed version of every row,
//     locked or not, so an earlier row of a key that another relay is
//     claiming at this moment still counts as pending and holds its key
//     back. Were the ordering condition part of the locking read, SKIP
//     LOCKED could pass over that earlier row as if it did not exist and
//     let a later row of its key through (MySQL 8 documents that a locking
//     clause does not reach into subqueries, but no plan is promised), so
//     the condition is kept out of it.
//  2. lock: SELECT … FOR UPDATE SKIP LOCKED of those candidates by primary
//     key, re-checking status and available_at on the latest committed
//     version: a candidate that another relay claimed (or claimed and
//     settled) since step 1 is skipped or no longer matches. The ordering
//     condition needs no re-check: an earlier row of the key was done or
//     permanent_failed at step 1 and only a producer's late commit or
//     `bridge retry` can make it unsettled again — the same window as the
//     PostgreSQL claim, whose subquery also reads a statement snapshot.
//  3. update: the locked rows become in_flight under owner.
//  4. read: the claimed rows.
//
// READ COMMITTED: every statement reads the newest committed data, and
// InnoDB takes no gap locks, so the claim does not block producers' inserts.
// SKIP LOCKED never waits, so two claims cannot deadlock.
func (mysqlDialect) claim(ctx context.Context, db *DB, s *statements, p ClaimParams, cursor *keyCursor) (_ []Row, err error) {
	q := strings.Split(s.claim, mysqlClaimSep)
	if len(q) != 4 {
		return nil, fmt.Errorf("mysql claim: want 4 statements, have %d", len(q))
	}
	maxBytes, maxPayload := p.sizeParams()
	tx, err := db.SQL.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	from := cursor.get()
	found, err := readMySQLCandidates(ctx, tx, q[0], from, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("select candidates: %w", err)
	}
	candidates := found.ids
	var out []Row
	if len(candidates) > 0 {
		args := append(append([]any{maxPayload}, anys(candidates)...), p.Limit)
		locked, err := mysqlFitting(ctx, tx, mysqlExpand(q[1], len(candidates)), maxBytes, args...)
		if err != nil {
			return nil, fmt.Errorf("lock candidates: %w", err)
		}
		if len(locked) > 0 {
			ids := anys(locked)
			if _, err := tx.ExecContext(ctx, mysqlExpand(q[2], len(locked)), append([]any{p.Owner}, ids...)...); err != nil {
				return nil, fmt.Errorf("lease: %w", err)
			}
			rows, err := tx.QueryContext(ctx, mysqlExpand(q[3], len(locked)), append([]any{maxPayload}, ids...)...)
			if err != nil {
				return nil, err
			}
			if out, err = scanClaimed(rows, maxPayload); err != nil {
				return nil, err
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	cursor.set(found.nextCursor(from, out))
	return out, nil
}

// mysqlFitting runs the lock statement of the claim and returns the ids it
// locked, in id order, as many as fit in maxBytes (the first one always):
// the rows it locked beyond them are left to the next claim, their locks
// released when the claim commits.
func mysqlFitting(ctx context.Context, tx *sql.Tx, query string, maxBytes int64, args ...any) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	var total int64
	for rows.Next() {
		var id, size int64
		if err := rows.Scan(&id, &size); err != nil {
			return nil, err
		}
		if total += size; len(ids) > 0 && total > maxBytes {
			break
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// requeue runs the in-flight recovery statements (see sqlFor) in one READ
// COMMITTED transaction, at most mysqlBatchMax rows per call: the relay
// calls it before every claim, so a longer list is worked off over the
// next claims. A stale row locked by another transaction (a relay paused
// in the middle of a mark) is skipped, not waited for, and found again
// next time.
func (d mysqlDialect) requeue(ctx context.Context, db *DB, s *statements, olderThan time.Duration) (_ int, err error) {
	q := strings.Split(s.requeue, mysqlClaimSep)
	if len(q) != 3 {
		return 0, fmt.Errorf("mysql requeue: want 3 statements, have %d", len(q))
	}
	ago := d.ago(olderThan)
	tx, err := db.SQL.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	stale, err := mysqlIDList(ctx, tx, q[0], ago, mysqlBatchMax)
	if err != nil {
		return 0, fmt.Errorf("select stale leases: %w", err)
	}
	var n int64
	if len(stale) > 0 {
		locked, err := mysqlIDList(ctx, tx, mysqlExpand(q[1], len(stale)), append(anys(stale), ago)...)
		if err != nil {
			return 0, fmt.Errorf("lock stale leases: %w", err)
		}
		if len(locked) > 0 {
			res, err := tx.ExecContext(ctx, mysqlExpand(q[2], len(locked)), anys(locked)...)
			if err != nil {
				return 0, fmt.Errorf("requeue: %w", err)
			}
			if n, err = res.RowsAffected(); err != nil {
				return 0, err
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return int(n), nil
}

func mysqlIDList(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// insert runs statements.insert and returns the new id, or sql.ErrNoRows
// when a row with the key exists. Keys longer than the table's columns are
// refused here with a message naming the limit.
func (mysqlDialect) insert(ctx context.Context, db *DB, s *statements, args ...any) (int64, error) {
	if key, _ := args[0].(string); len(key) > mysqlKeyMax {
		return 0, fmt.Errorf("%w: idempotency key %.40q… is %d bytes; a MySQL/MariaDB outbox holds keys of at most %d bytes", ErrInvalidEntry, key, len(key), mysqlKeyMax)
	}
	if ok, _ := args[4].(sql.NullString); len(ok.String) > mysqlKeyMax {
		return 0, fmt.Errorf("%w: ordering key %.40q… is %d bytes; a MySQL/MariaDB outbox holds keys of at most %d bytes", ErrInvalidEntry, ok.String, len(ok.String), mysqlKeyMax)
	}
	res, err := db.SQL.ExecContext(ctx, s.insert, args...)
	if err != nil {
		return 0, err
	}
	// Rows affected are rows changed: openMySQL turns clientFoundRows off.
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, sql.ErrNoRows
	}
	return res.LastInsertId()
}

func (mysqlDialect) markDone(ctx context.Context, db *DB, s *statements, owner string, done []Done, del bool) (int64, error) {
	return mysqlEach(ctx, db.SQL, len(done), func(i int) int64 { return done[i].ID }, func(idx []int) (string, []any) {
		var ids, attempts, streams, seqs []any
		for _, i := range idx {
			d := done[i]
			ids = append(ids, d.ID)
			attempts = append(attempts, d.ID, d.Attempt)
			streams = append(streams, d.ID, d.Stream)
			seqs = append(seqs, d.ID, int64(d.Seq))
		}
		if del {
			return mysqlExpand(s.deleteDone, len(idx)), concat(ids, attempts, []any{owner})
		}
		return mysqlExpand(s.markDone, len(idx)), concat(streams, seqs, ids, attempts, []any{owner})
	})
}

func (mysqlDialect) markFailed(ctx context.Context, db *DB, s *statements, owner string, failures []Failure) (int64, error) {
	return mysqlEach(ctx, db.SQL, len(failures), func(i int) int64 { return failures[i].ID }, func(idx []int) (string, []any) {
		var statuses, errs, delays, refunds, ids, attempts []any
		for _, i := range idx {
			f := failures[i]
			refund := 0
			if f.Refund {
				refund = 1
			}
			statuses = append(statuses, f.ID, string(f.status()))
			errs = append(errs, f.ID, SanitizeError(f.Err))
			delays = append(delays, f.ID, micros(f.Backoff))
			refunds = append(refunds, f.ID, refund)
			ids = append(ids, f.ID)
			attempts = append(attempts, f.ID, f.Attempt)
		}
		return mysqlExpand(s.markFailed, len(idx)), concat(statuses, errs, delays, refunds, ids, attempts, []any{owner})
	})
}

// mysqlEach writes n marks with one statement per group of at most
// mysqlBatchMax rows. A group never holds the same id twice (CASE id would
// take the first arm only), so a batch with a repeated id takes two groups.
// It returns the number of rows changed.
func mysqlEach(ctx context.Context, db *sql.DB, n int, id func(i int) int64, build func(idx []int) (string, []any)) (int64, error) {
	var groups [][]int
	var members []map[int64]bool
	for i := 0; i < n; i++ {
		g := 0
		for g < len(groups) && (len(groups[g]) == mysqlBatchMax || members[g][id(i)]) {
			g++
		}
		if g == len(groups) {
			groups, members = append(groups, nil), append(members, map[int64]bool{})
		}
		groups[g] = append(groups[g], i)
		members[g][id(i)] = true
	}
	var total int64
	for _, idx := range groups {
		query, args := build(idx)
		res, err := db.ExecContext(ctx, query, args...)
		if err != nil {
			return total, err
		}
		changed, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += changed
	}
	return total, nil
}

// mysqlExpand expands the markers of query for n rows: mysqlIDs becomes n
// placeholders, mysqlArms n "WHEN ? THEN ?" arms.
func mysqlExpand(query string, n int) string {
	ids := strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
	arms := strings.TrimSuffix(strings.Repeat("WHEN ? THEN ? ", n), " ")
	return strings.NewReplacer(mysqlIDs, ids, mysqlArms, arms).Replace(query)
}

func anys(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

func concat(lists ...[]any) []any {
	var out []any
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// isUndefinedTable reports a missing table or column: MySQL error 1146
// ER_NO_SUCH_TABLE, 1054 ER_BAD_FIELD_ERROR (unknown column) or 1049
// ER_BAD_DB_ERROR (unknown database). CheckSchema treats all three as "not
// migrated".
func (mysqlDialect) isUndefinedTable(err error) bool {
	switch mysqlCode(err) {
	case 1146, 1054, 1049:
		return true
	}
	return false
}

// ago is a number of microseconds: "UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND".
func (mysqlDialect) ago(d time.Duration) any { return micros(d) }

// idList is a JSON array, read with JSON_TABLE.
func (mysqlDialect) idList(ids []int64) any {
	if ids == nil {
		ids = []int64{}
	}
	b, _ := json.Marshal(ids)
	return string(b)
}

func mysqlCode(err error) uint16 {
	var e *mysql.MySQLError
	if errors.As(err, &e) {
		return e.Number
	}
	return 0
}
