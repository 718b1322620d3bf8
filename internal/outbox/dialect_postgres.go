package outbox

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
)

// postgresDialect targets PostgreSQL 13+. Claims use FOR UPDATE SKIP LOCKED;
// marks are one UPDATE per batch with array parameters.
type postgresDialect struct{}

func (postgresDialect) name() string         { return "postgres" }
func (postgresDialect) goose() goose.Dialect { return goose.DialectPostgres }

// PostgreSQL creates an index in its table's schema; the name is unqualified.
func (postgresDialect) indexName(t tableName, suffix string) string {
	return t.name + "_" + suffix + "_idx"
}

// pgRowSize is what a candidate row of the claim would hold in the relay's
// memory (see Row.size): its payload when the claim reads it (not longer
// than $6) and its headers. Neither is read for it: octet_length of a
// bytea stored out of line (TOAST) reads the length from the pointer, and
// pg_column_size is the stored size of the jsonb.
const pgRowSize = `CASE WHEN octet_length(o.payload) <= $6::bigint THEN octet_length(o.payload) ELSE 0 END + pg_column_size(o.headers)`

// unsettled is the predicate of the ordering index: a row that holds back
// the later rows of its ordering key.
const unsettled = "e.status IN ('pending', 'in_flight', 'failed')"

// sqlFor renders the statements.
//
// The claim (owner $1, limit $2, key cursor $3, key window $4, max bytes
// $5, max payload $6) locks rows from two places (SKIP LOCKED), then
// updates the first $2 of them in id order, as many as fit in $5 bytes
// (the first one always), and returns the payload of those whose payload
// is at most $6 bytes (the others' only by its length):
//   - rows without an ordering key: the unordered partial index, in id order;
//   - the first unsettled row (the head) of each ordering key that is
//     claimable: a skip scan of the ordering index, one index descent per
//     key — the keys after the cursor, then from the first key up to the
//     cursor, at most $4 keys each (keyWindow) — that stops after $2
//     claimable heads.
//
// A row behind its key's head is never read, so a claim costs the same
// with a backlog of 100 or 1,000,000 rows queued behind a few keys (a scan
// in id order that skipped them took 112 ms for 40 rows out of 10,000). The
// next-to-last column is the next cursor: the last key claimed in scan order, so
// that the next claim starts after it and every key gets its turn when
// more keys are claimable than a claim takes. Key order is the database's
// (the column's collation), which is why the cursor is computed here; the
// two last columns say whether a claimed key came after the cursor and
// whether any key with unsettled rows does: when none was claimed after
// it, jumpKeyCursor moves it.
//
// The marks compare coalesce(o.status, …)
// rather than o.status with 'in_flight' on purpose: the plain form lets the planner drive the join
// from the in-flight partial index, whose row estimate is stale during a
// burst (1 row against thousands), and join every in-flight row with every
// array element — measured 2.3 s for 1,000 marks among 3,000 in-flight
// rows. The coalesce form leaves the primary key lookup per array element
// as the only plan: 25 ms.
func (postgresDialect) sqlFor(t tableName) statements {
	T := t.String()
	return statements{
		claim: `WITH RECURSIVE after_cursor(k, id, status, available_at, n) AS (
	(SELECT e.ordering_key, e.id, e.status, e.available_at, 1 FROM ` + T + ` e
	 WHERE e.ordering_key > $3 AND ` + unsettled + `
	 ORDER BY e.ordering_key, e.id LIMIT 1)
	UNION ALL
	SELECT n.*, h.n + 1 FROM after_cursor h CROSS JOIN LATERAL (
		SELECT e.ordering_key, e.id, e.status, e.available_at FROM ` + T + ` e
		WHERE e.ordering_key > h.k AND ` + unsettled + `
		ORDER BY e.ordering_key, e.id LIMIT 1) n
	WHERE h.n < $4
), up_to_cursor(k, id, status, available_at, n) AS (
	(SELECT e.ordering_key, e.id, e.status, e.available_at, 1 FROM ` + T + ` e
	 WHERE e.ordering_key <= $3 AND ` + unsettled + `
	 ORDER BY e.ordering_key, e.id LIMIT 1)
	UNION ALL
	SELECT n.*, h.n + 1 FROM up_to_cursor h CROSS JOIN LATERAL (
		SELECT e.ordering_key, e.id, e.status, e.available_at FROM ` + T + ` e
		WHERE e.ordering_key > h.k AND e.ordering_key <= $3 AND ` + unsettled + `
		ORDER BY e.ordering_key, e.id LIMIT 1) n
	WHERE h.n < $4
), free AS (
	SELECT o.id, ` + pgRowSize + ` AS row_bytes FROM ` + T + ` o
	WHERE o.ordering_key IS NULL AND o.status IN ('pending', 'failed') AND o.available_at <= now()
	ORDER BY o.id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), heads AS (
	SELECT o.id, ` + pgRowSize + ` AS row_bytes FROM ` + T + ` o
	WHERE o.id = ANY(ARRAY(
		SELECT h.id FROM (SELECT * FROM after_cursor UNION ALL SELECT * FROM up_to_cursor) h
		WHERE h.status IN ('pending', 'failed') AND h.available_at <= now()
		LIMIT $2))
	  AND o.status IN ('pending', 'failed') AND o.available_at <= now()
	FOR UPDATE SKIP LOCKED
), c AS (
	SELECT id, row_bytes FROM free UNION ALL SELECT id, row_bytes FROM heads
	ORDER BY id
	LIMIT $2
), fit AS (
	SELECT id FROM (
		SELECT id, sum(row_bytes) OVER w AS total, row_number() OVER w AS n FROM c
		WINDOW w AS (ORDER BY id ROWS UNBOUNDED PRECEDING)) f
	WHERE n = 1 OR total <= $5::bigint
), claimed AS (
	UPDATE ` + T + ` o SET status = 'in_flight', owner = $1, claimed_at = now(),
		first_claimed_at = COALESCE(o.first_claimed_at, now()), attempts = o.attempts + 1
	WHERE o.id = ANY(ARRAY(SELECT id FROM fit))
	RETURNING o.id, o.idempotency_key, o.subject, CASE WHEN octet_length(o.payload) <= $6::bigint THEN o.payload END AS payload,
		o.headers::text, o.ordering_key, o.attempts, o.created_at, o.claimed_at, o.first_claimed_at, octet_length(o.payload) AS payload_size
)
SELECT id, idempotency_key, subject, payload, headers, ordering_key, attempts, created_at, claimed_at, first_claimed_at, payload_size,
	coalesce(max(ordering_key) FILTER (WHERE ordering_key <= $3) OVER (),
		max(ordering_key) FILTER (WHERE ordering_key > $3) OVER ()),
	coalesce(bool_or(ordering_key > $3) OVER (), false),
	EXISTS (SELECT 1 FROM ` + T + ` e WHERE e.ordering_key > $3 AND ` + unsettled + `)
FROM claimed`,
		jump: `WITH RECURSIVE walk(k, n) AS (
	(SELECT e.ordering_key, 1 FROM ` + T + ` e WHERE e.ordering_key > $1 AND ` + unsettled + `
	 ORDER BY e.ordering_key LIMIT 1)
	UNION ALL
	SELECT x.k, w.n + 1 FROM walk w CROSS JOIN LATERAL (
		SELECT e.ordering_key AS k FROM ` + T + ` e WHERE e.ordering_key > w.k AND ` + unsettled + `
		ORDER BY e.ordering_key LIMIT 1) x
	WHERE w.n < $2
)
SELECT k FROM walk WHERE n = $2`,
		requeue: `UPDATE ` + T + ` SET status = 'failed', owner = NULL, available_at = now(),
	last_error = 'requeued after inflight timeout'
WHERE status = 'in_flight' AND claimed_at < now() - $1 * interval '1 microsecond'`,
		stats:        `SELECT status, count(*), min(created_at), now() FROM ` + T + ` GROUP BY status`,
		recentErrors: `SELECT id, status, attempts, last_error FROM ` + T + ` WHERE status IN ('failed', 'permanent_failed') ORDER BY id DESC LIMIT $1`,
		insert: `INSERT INTO ` + T + ` (idempotency_key, subject, payload, headers, ordering_key)
VALUES ($1, $2, $3, $4::jsonb, $5) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id`,
		probe:          `SELECT ` + columnList + ` FROM ` + T + ` WHERE false`,
		retryIDs:       `UPDATE ` + T + ` SET ` + retrySet + `now() WHERE status = 'permanent_failed' AND id = ANY($1)`,
		retryAll:       `UPDATE ` + T + ` SET ` + retrySet + `now() WHERE status = 'permanent_failed'`,
		retryFailedIDs: `UPDATE ` + T + ` SET available_at = now() WHERE status = 'failed' AND id = ANY($1)`,
		retryAllFailed: `UPDATE ` + T + ` SET available_at = now() WHERE status = 'failed'`,
		retryable:      `SELECT id, subject, status FROM ` + T + ` WHERE status IN ('failed', 'permanent_failed') ORDER BY id`,
		oldestFailed:   `SELECT id, subject, attempts, last_error, created_at, now() FROM ` + T + ` WHERE status = 'failed' ORDER BY id LIMIT 1`,
		stalled: `SELECT EXISTS (SELECT 1 FROM ` + T + ` o WHERE o.status IN ('pending', 'failed')
	AND o.available_at < now() - $1 * interval '1 microsecond'
	AND NOT EXISTS (SELECT 1 FROM ` + T + ` e WHERE e.ordering_key = o.ordering_key AND e.id < o.id AND ` + unsettled + `))`,
		purge: `DELETE FROM ` + T + ` WHERE id IN (
	SELECT id FROM ` + T + ` WHERE status = 'done' AND relayed_at < now() - $1 * interval '1 microsecond' LIMIT $2)`,
		markDone: `UPDATE ` + T + ` o SET status = 'done', relayed_at = now(), owner = NULL,
	stream = m.stream, stream_seq = m.seq, last_error = NULL
FROM unnest($2::bigint[], $3::int[], $4::text[], $5::bigint[]) AS m(id, attempt, stream, seq)
WHERE o.id = m.id AND o.attempts = m.attempt AND coalesce(o.status, '') = 'in_flight' AND o.owner = $1`,
		deleteDone: `DELETE FROM ` + T + ` o
USING unnest($2::bigint[], $3::int[]) AS m(id, attempt)
WHERE o.id = m.id AND o.attempts = m.attempt AND coalesce(o.status, '') = 'in_flight' AND o.owner = $1`,
		markFailed: `UPDATE ` + T + ` o SET status = m.status, last_error = m.err, owner = NULL,
	available_at = now() + m.delay * interval '1 microsecond',
	attempts = o.attempts - CASE WHEN m.refund THEN 1 ELSE 0 END
FROM unnest($2::bigint[], $3::int[], $4::text[], $5::text[], $6::bigint[], $7::bool[])
	AS m(id, attempt, status, err, delay, refund)
WHERE o.id = m.id AND o.attempts = m.attempt AND coalesce(o.status, '') = 'in_flight' AND o.owner = $1`,
	}
}

// claim runs the claim from the store's key cursor and moves the cursor.
func (postgresDialect) claim(ctx context.Context, db *DB, s *statements, p ClaimParams, cursor *keyCursor) ([]Row, error) {
	from, window := cursor.get(), keyWindow(p.Limit)
	maxBytes, maxPayload := p.sizeParams()
	var next sql.NullString
	var afterCursor, keysAfter bool
	var out []Row
	err := db.write(ctx, func(q querier) error {
		rows, err := q.QueryContext(ctx, s.claim, p.Owner, p.Limit, from, window, maxBytes, maxPayload)
		if err != nil {
			return err
		}
		out, err = scanClaimed(rows, maxPayload, &next, &afterCursor, &keysAfter)
		return err
	})
	if err != nil {
		return nil, err
	}
	switch {
	case afterCursor:
		cursor.set(next)
	case p.cutByBytes(out):
		// The heads left out for want of room come first next time.
	case len(out) > 0 && !keysAfter:
		// What jumpKeyCursor would find, without its query on the way of
		// every claim of rows without keys: no key after the cursor, so
		// the next claim walks from the first key.
		cursor.set(sql.NullString{Valid: true})
	default:
		jumpKeyCursor(ctx, db.SQL, s, cursor, from, window)
	}
	return out, nil
}

// requeue is one UPDATE.
func (d postgresDialect) requeue(ctx context.Context, db *DB, s *statements, olderThan time.Duration) (int, error) {
	return execRequeue(ctx, d, db, s, olderThan)
}

func (postgresDialect) markDone(ctx context.Context, db *DB, s *statements, owner string, done []Done, del bool) (int64, error) {
	ids := make([]int64, len(done))
	attempts := make([]int32, len(done))
	streams := make([]string, len(done))
	seqs := make([]int64, len(done))
	for i, d := range done {
		ids[i], attempts[i], streams[i], seqs[i] = d.ID, int32(d.Attempt), d.Stream, int64(d.Seq)
	}
	if del {
		return db.exec(ctx, s.deleteDone, owner, ids, attempts)
	}
	return db.exec(ctx, s.markDone, owner, ids, attempts, streams, seqs)
}

func (postgresDialect) markFailed(ctx context.Context, db *DB, s *statements, owner string, failures []Failure) (int64, error) {
	n := len(failures)
	ids, attempts := make([]int64, n), make([]int32, n)
	statuses, errs := make([]string, n), make([]string, n)
	delays, refunds := make([]int64, n), make([]bool, n)
	for i, f := range failures {
		ids[i], attempts[i] = f.ID, int32(f.Attempt)
		statuses[i], errs[i] = string(f.status()), SanitizeError(f.Err)
		delays[i], refunds[i] = micros(f.Backoff), f.Refund
	}
	return db.exec(ctx, s.markFailed, owner, ids, attempts, statuses, errs, delays, refunds)
}

// SQLSTATE 42P01 undefined_table.
func (postgresDialect) isUndefinedTable(err error) bool { return pgCode(err) == "42P01" }

// ago is a number of microseconds: "now() - $n * interval '1 microsecond'".
func (postgresDialect) ago(d time.Duration) any { return micros(d) }

// idList is a bigint[] parameter.
func (postgresDialect) idList(ids []int64) any { return ids }

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
