package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteDialect targets SQLite 3.35+ (RETURNING). SQLite has one writer at a
// time, so a claim is a single UPDATE … RETURNING without SKIP LOCKED; marks
// run one prepared statement per row inside one transaction.
type sqliteDialect struct{}

// sqliteNow is the database clock as stored: UTC, RFC 3339, milliseconds.
const sqliteNow = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`

// sqliteNowPlus adds a signed number of seconds (the statement's parameter)
// to sqliteNow.
const sqliteNowPlus = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.6f seconds', ?))`

func (sqliteDialect) name() string         { return "sqlite" }
func (sqliteDialect) goose() goose.Dialect { return goose.DialectSQLite3 }

// SQLite qualifies the index, not the table, with the schema.
func (sqliteDialect) indexName(t tableName, suffix string) string {
	if t.schema == "" {
		return t.name + "_" + suffix + "_idx"
	}
	return t.schema + "." + t.name + "_" + suffix + "_idx"
}

// sqliteRowSize is what a candidate row of the claim would hold in the
// relay's memory (see Row.size): its payload when the claim reads it (not
// longer than ?6 bytes) and its headers. octet_length reads the length
// from the record header, not the value (SQLite's OPFLAG_BYTELENARG).
const sqliteRowSize = `CASE WHEN octet_length(o.payload) <= ?6 THEN octet_length(o.payload) ELSE 0 END + octet_length(o.headers)`

// sqlFor renders the statements. The claim takes what the PostgreSQL claim
// takes (see postgresDialect.sqlFor): rows without an ordering key in id
// order, and the claimable first unsettled row of each ordering key, found
// key by key from the cursor ?3 with one index seek per key, at most ?4
// keys per lap (keyWindow); as many as fit in ?5 bytes (the first one
// always), with the payloads not longer than ?6 bytes. The key walk
// must run as a co-routine, which stops once the claim has its ?2 rows:
// hence NOT MATERIALIZED (without it SQLite 3.54 materializes every key
// first) and scalar subqueries rather than a join with the walk.
func (sqliteDialect) sqlFor(t tableName) statements {
	T := t.String()
	// head is the first unsettled row of the ordering key x.k.
	head := `(SELECT min(e.id) FROM ` + T + ` e WHERE e.ordering_key = x.k AND ` + unsettled + `)`
	return statements{
		claim: `WITH RECURSIVE after_cursor(k, n) AS NOT MATERIALIZED (
	SELECT (SELECT min(e.ordering_key) FROM ` + T + ` e WHERE e.ordering_key > ?3 AND ` + unsettled + `), 1
	UNION ALL
	SELECT (SELECT min(e.ordering_key) FROM ` + T + ` e WHERE e.ordering_key > a.k AND ` + unsettled + `), a.n + 1
	FROM after_cursor a WHERE a.k IS NOT NULL AND a.n < ?4
), up_to_cursor(k, n) AS NOT MATERIALIZED (
	SELECT (SELECT min(e.ordering_key) FROM ` + T + ` e WHERE e.ordering_key <= ?3 AND ` + unsettled + `), 1
	UNION ALL
	SELECT (SELECT min(e.ordering_key) FROM ` + T + ` e WHERE e.ordering_key > u.k AND e.ordering_key <= ?3 AND ` + unsettled + `), u.n + 1
	FROM up_to_cursor u WHERE u.k IS NOT NULL AND u.n < ?4
)
UPDATE ` + T + ` SET status = 'in_flight', owner = ?1, claimed_at = ` + sqliteNow + `,
	first_claimed_at = COALESCE(first_claimed_at, ` + sqliteNow + `), attempts = attempts + 1
WHERE id IN (
	SELECT id FROM (
		SELECT id, sum(row_bytes) OVER w AS total, row_number() OVER w AS n FROM (
			SELECT id, row_bytes FROM (SELECT o.id, ` + sqliteRowSize + ` AS row_bytes FROM ` + T + ` o
				WHERE o.ordering_key IS NULL AND o.status IN ('pending', 'failed') AND o.available_at <= ` + sqliteNow + `
				ORDER BY o.id LIMIT ?2)
			UNION ALL
			SELECT id, row_bytes FROM (SELECT o.id, ` + sqliteRowSize + ` AS row_bytes
				FROM (SELECT k FROM after_cursor WHERE k IS NOT NULL UNION ALL SELECT k FROM up_to_cursor WHERE k IS NOT NULL) x
				JOIN ` + T + ` o ON o.id = ` + head + `
				WHERE o.status IN ('pending', 'failed') AND o.available_at <= ` + sqliteNow + `
				LIMIT ?2)
			ORDER BY 1 LIMIT ?2)
		WINDOW w AS (ORDER BY id ROWS UNBOUNDED PRECEDING))
	WHERE n = 1 OR total <= ?5)
RETURNING id, idempotency_key, subject, CASE WHEN octet_length(payload) <= ?6 THEN payload END, headers, ordering_key,
	attempts, created_at, claimed_at, first_claimed_at, octet_length(payload)`,
		jump: `WITH RECURSIVE walk(k, n) AS (
	SELECT (SELECT min(e.ordering_key) FROM ` + T + ` e WHERE e.ordering_key > ?1 AND ` + unsettled + `), 1
	UNION ALL
	SELECT (SELECT min(e.ordering_key) FROM ` + T + ` e WHERE e.ordering_key > w.k AND ` + unsettled + `), w.n + 1
	FROM walk w WHERE w.k IS NOT NULL AND w.n < ?2
)
SELECT k FROM walk WHERE n = ?2 AND k IS NOT NULL`,
		requeue: `UPDATE ` + T + ` SET status = 'failed', owner = NULL, available_at = ` + sqliteNow + `,
	last_error = 'requeued after inflight timeout'
WHERE status = 'in_flight' AND claimed_at < ` + sqliteNowPlus,
		stats:        `SELECT status, count(*), min(created_at), ` + sqliteNow + ` FROM ` + T + ` GROUP BY status`,
		recentErrors: `SELECT id, status, attempts, last_error FROM ` + T + ` WHERE status IN ('failed', 'permanent_failed') ORDER BY id DESC LIMIT ?`,
		insert: `INSERT INTO ` + T + ` (idempotency_key, subject, payload, headers, ordering_key)
VALUES (?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id`,
		probe:          `SELECT ` + columnList + ` FROM ` + T + ` WHERE 0`,
		retryIDs:       `UPDATE ` + T + ` SET ` + retrySet + sqliteNow + ` WHERE status = 'permanent_failed' AND id IN (SELECT value FROM json_each(?))`,
		retryAll:       `UPDATE ` + T + ` SET ` + retrySet + sqliteNow + ` WHERE status = 'permanent_failed'`,
		retryFailedIDs: `UPDATE ` + T + ` SET available_at = ` + sqliteNow + ` WHERE status = 'failed' AND id IN (SELECT value FROM json_each(?))`,
		retryAllFailed: `UPDATE ` + T + ` SET available_at = ` + sqliteNow + ` WHERE status = 'failed'`,
		retryable:      `SELECT id, subject, status FROM ` + T + ` WHERE status IN ('failed', 'permanent_failed') ORDER BY id`,
		oldestFailed:   `SELECT id, subject, attempts, last_error, created_at, ` + sqliteNow + ` FROM ` + T + ` WHERE status = 'failed' ORDER BY id LIMIT 1`,
		stalled: `SELECT EXISTS (SELECT 1 FROM ` + T + ` o WHERE o.status IN ('pending', 'failed')
	AND o.available_at < ` + sqliteNowPlus + `
	AND NOT EXISTS (SELECT 1 FROM ` + T + ` e WHERE e.ordering_key = o.ordering_key AND e.id < o.id AND e.status IN ('pending', 'in_flight', 'failed')))`,
		purge: `DELETE FROM ` + T + ` WHERE id IN (
	SELECT id FROM ` + T + ` WHERE status = 'done' AND relayed_at < ` + sqliteNowPlus + ` LIMIT ?)`,
		markDone: `UPDATE ` + T + ` SET status = 'done', relayed_at = ` + sqliteNow + `, owner = NULL,
	stream = ?, stream_seq = ?, last_error = NULL
WHERE id = ? AND attempts = ? AND status = 'in_flight' AND owner = ?`,
		deleteDone: `DELETE FROM ` + T + ` WHERE id = ? AND attempts = ? AND status = 'in_flight' AND owner = ?`,
		markFailed: `UPDATE ` + T + ` SET status = ?, last_error = ?, owner = NULL,
	available_at = ` + sqliteNowPlus + `, attempts = attempts - ?
WHERE id = ? AND attempts = ? AND status = 'in_flight' AND owner = ?`,
	}
}

// claim runs the claim from the store's key cursor and moves the cursor:
// nextKeyCursor when it took a keyed row after the cursor, else
// jumpKeyCursor.
func (sqliteDialect) claim(ctx context.Context, db *DB, s *statements, p ClaimParams, cursor *keyCursor) ([]Row, error) {
	from, window := cursor.get(), keyWindow(p.Limit)
	maxBytes, maxPayload := p.sizeParams()
	rows, err := db.SQL.QueryContext(ctx, s.claim, p.Owner, p.Limit, from, window, maxBytes, maxPayload)
	if err != nil {
		return nil, err
	}
	out, err := scanClaimed(rows, maxPayload)
	if err != nil {
		return nil, err
	}
	next, afterCursor := nextKeyCursor(from, out)
	switch {
	case afterCursor:
		cursor.set(next)
	case p.cutByBytes(out):
		// The heads left out for want of room come first next time.
	default:
		jumpKeyCursor(ctx, db.SQL, s, cursor, from, window)
	}
	return out, nil
}

// nextKeyCursor is the cursor after a claim from cursor from that took
// rows: the last key claimed in the order the claim walked the keys — the
// largest key up to from if the walk wrapped around, else the largest key
// — or no key when no row had one; afterCursor reports whether a claimed
// key came after from. Keys compare as bytes, as SQLite's default BINARY
// collation of the column does.
func nextKeyCursor(from string, rows []Row) (next sql.NullString, afterCursor bool) {
	var after, upTo sql.NullString
	for _, r := range rows {
		k := r.OrderingKey
		switch {
		case !k.Valid:
		case k.String <= from:
			if !upTo.Valid || k.String > upTo.String {
				upTo = k
			}
		case !after.Valid || k.String > after.String:
			after = k
		}
	}
	if upTo.Valid {
		return upTo, after.Valid
	}
	return after, after.Valid
}

// requeue is one UPDATE.
func (d sqliteDialect) requeue(ctx context.Context, db *DB, s *statements, olderThan time.Duration) (int, error) {
	return execRequeue(ctx, d, db, s, olderThan)
}

func (sqliteDialect) markDone(ctx context.Context, db *DB, s *statements, owner string, done []Done, del bool) (int64, error) {
	query := s.markDone
	if del {
		query = s.deleteDone
	}
	return sqliteEach(ctx, db.SQL, query, len(done), func(i int) []any {
		d := done[i]
		if del {
			return []any{d.ID, d.Attempt, owner}
		}
		return []any{d.Stream, int64(d.Seq), d.ID, d.Attempt, owner}
	})
}

func (sqliteDialect) markFailed(ctx context.Context, db *DB, s *statements, owner string, failures []Failure) (int64, error) {
	return sqliteEach(ctx, db.SQL, s.markFailed, len(failures), func(i int) []any {
		f := failures[i]
		refund := 0
		if f.Refund {
			refund = 1
		}
		return []any{string(f.status()), SanitizeError(f.Err), f.Backoff.Seconds(), refund, f.ID, f.Attempt, owner}
	})
}

// sqliteEach runs query once per row inside one transaction and returns
// the number of rows it changed.
func sqliteEach(ctx context.Context, db *sql.DB, query string, n int, args func(i int) []any) (_ int64, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, query)
	if err != nil {
		return 0, err
	}
	defer stmt.Close()
	var total int64
	for i := 0; i < n; i++ {
		res, err := stmt.ExecContext(ctx, args(i)...)
		if err != nil {
			return 0, err
		}
		changed, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		total += changed
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return total, nil
}

func (sqliteDialect) isUndefinedTable(err error) bool {
	// SQLite reports a missing table only as SQLITE_ERROR with this text;
	// there is no narrower code (https://sqlite.org/rescode.html#error).
	return sqliteCode(err) == sqlite3.SQLITE_ERROR && strings.Contains(err.Error(), "no such table")
}

// ago is a negative number of seconds for sqliteNowPlus.
func (sqliteDialect) ago(d time.Duration) any { return -d.Seconds() }

// idList is a JSON array, read with json_each.
func (sqliteDialect) idList(ids []int64) any {
	b, _ := json.Marshal(ids)
	return string(b)
}

func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}
