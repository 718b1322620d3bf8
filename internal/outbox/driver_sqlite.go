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

// sqliteDriver targets SQLite 3.35+ (RETURNING). SQLite has one writer at a
// time, so a claim is a single UPDATE … RETURNING without SKIP LOCKED;
// marks run one prepared statement per row inside one transaction. Its
// statements are queries/sqlite/*.sql.
type sqliteDriver struct{}

var _ driver = sqliteDriver{}

func (sqliteDriver) dialect() Dialect { return DialectSQLite }

func (sqliteDriver) capabilities() Capabilities {
	return Capabilities{TransactionalDDL: true}
}

func (sqliteDriver) schemes() []string { return []string{"sqlite:"} }

func (sqliteDriver) open(ctx context.Context, rawURL string, _ Session) (*DB, error) {
	return openSQLite(ctx, strings.TrimPrefix(rawURL, "sqlite:"))
}

// SQLite qualifies the index, not the table, with the schema.
func (sqliteDriver) indexName(t tableName, suffix string) string {
	if t.schema == "" {
		return t.name + "_" + suffix + "_idx"
	}
	return t.schema + "." + t.name + "_" + suffix + "_idx"
}

func (sqliteDriver) migrations() migrationSpec {
	return migrationSpec{
		goose: goose.DialectSQLite3,
		versionTableDDL: func(name string) string {
			return "CREATE TABLE " + name + " (\n    id INTEGER PRIMARY KEY AUTOINCREMENT,\n    version_id INTEGER NOT NULL,\n    is_applied INTEGER NOT NULL,\n    tstamp TIMESTAMP DEFAULT (datetime('now'))\n)"
		},
		trueLiteral: "1",
		missingSchema: func(schema string) string {
			return fmt.Sprintf("database %q is not attached", schema)
		},
	}
}

// classify: SQLite reports a missing table or column only as SQLITE_ERROR
// with the text "no such table: …" or "no such column: …"; there is no
// narrower code (https://sqlite.org/rescode.html#error).
func (sqliteDriver) classify(err error) errorClass {
	if sqliteCode(err) != sqlite3.SQLITE_ERROR {
		return errorOther
	}
	switch msg := err.Error(); {
	case strings.Contains(msg, "no such table"):
		return errorUndefinedTable
	case strings.Contains(msg, "no such column"):
		return errorUndefinedColumn
	}
	return errorOther
}

// writable pings: a SQLite file the relay opened is written by it.
func (sqliteDriver) writable(ctx context.Context, conn *sql.Conn) (string, error) {
	return "", conn.PingContext(ctx)
}

func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// sqliteExecutor runs the operations of one table on SQLite.
type sqliteExecutor struct {
	readers
	db *sql.DB
	q  sqliteQueries
}

// sqliteQueries are the statements of queries/sqlite/, rendered for one
// table; each file says its parameters.
type sqliteQueries struct {
	claim, jump, requeue             string
	markDone, deleteDone, markFailed string
	insert                           string
	retryDead, retryAllDead          string
	retryFailed, retryAllFailed      string
	stalled, backlog, purge          string
}

// tables lists the tables of the main database; SQLite outboxes have no
// schema (qualified is refused by the configuration).
func (sqliteDriver) tables(ctx context.Context, db *sql.DB, _ bool, _ string) ([]listedTable, error) {
	return listTables(ctx, db, `SELECT '', m.name, EXISTS (SELECT 1 FROM pragma_table_info(m.name) p WHERE p.name = 'idempotency_key')
		FROM sqlite_master m WHERE m.type = 'table'`)
}

func (sqliteDriver) schemas(context.Context, *sql.DB) ([]string, error) { return nil, nil }

func (d sqliteDriver) executor(db *DB, t tableName) (executor, error) {
	f, err := loadQueries(d, t)
	if err != nil {
		return nil, err
	}
	e := &sqliteExecutor{readers: takeReaders(db.SQL, f), db: db.SQL, q: sqliteQueries{
		claim: f.take("claim"), jump: f.take("jump"), requeue: f.take("requeue"),
		markDone: f.take("mark_done"), deleteDone: f.take("delete_done"), markFailed: f.take("mark_failed"),
		insert:    f.take("insert"),
		retryDead: f.take("retry_dead"), retryAllDead: f.take("retry_all_dead"),
		retryFailed: f.take("retry_failed"), retryAllFailed: f.take("retry_all_failed"),
		stalled: f.take("stalled"), backlog: f.take("backlog"), purge: f.take("purge"),
	}}
	return e, f.done()
}

// sqliteAgo is "now minus d" as now_plus takes it: a negative number of
// seconds.
func sqliteAgo(d time.Duration) float64 { return -d.Seconds() }

// Claim runs claim.sql from the cursor; the cursor goes to nextKeyCursor
// when the claim took a keyed row after it, else where jumpKeyCursor says.
func (e *sqliteExecutor) Claim(ctx context.Context, p *claimRowsParams) (claimResult, error) {
	from, window := p.Cursor, keyWindow(p.Limit)
	maxBytes, maxPayload := p.sizeParams()
	rows, err := e.db.QueryContext(ctx, e.q.claim, p.Owner, p.Limit, from, window, maxBytes, maxPayload)
	if err != nil {
		return claimResult{}, err
	}
	out, err := scanClaimed(rows, maxPayload, nil)
	if err != nil {
		return claimResult{}, err
	}
	res := claimResult{Rows: out}
	next, afterCursor := nextKeyCursor(from, out)
	switch {
	case afterCursor:
		res.NextCursor = next
	case p.cutByBytes(out):
		// The heads left out for want of room come first next time.
	default:
		res.NextCursor = jumpKeyCursor(ctx, e.db, e.q.jump, from, window)
	}
	return res, nil
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

// MarkDone runs mark_done.sql (or delete_done.sql) once per row.
func (e *sqliteExecutor) MarkDone(ctx context.Context, p *markDoneParams) (int64, error) {
	query := e.q.markDone
	if p.Delete {
		query = e.q.deleteDone
	}
	return sqliteEach(ctx, e.db, query, len(p.Done), func(i int) []any {
		d := p.Done[i]
		if p.Delete {
			return []any{d.ID, d.Attempt, p.Owner}
		}
		return []any{d.Stream, int64(d.Seq), d.ID, d.Attempt, p.Owner}
	})
}

// MarkFailed runs mark_failed.sql once per row.
func (e *sqliteExecutor) MarkFailed(ctx context.Context, p *markFailedParams) (int64, error) {
	return sqliteEach(ctx, e.db, e.q.markFailed, len(p.Failures), func(i int) []any {
		f := p.Failures[i]
		refund := 0
		if f.Refund {
			refund = 1
		}
		return []any{string(f.status()), SanitizeError(f.Err), f.Backoff.Seconds(), refund, f.ID, f.Attempt, p.Owner}
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

// Requeue is one UPDATE.
func (e *sqliteExecutor) Requeue(ctx context.Context, p *requeueParams) (int, error) {
	n, err := execCount(ctx, e.db, e.q.requeue, sqliteAgo(p.OlderThan))
	return int(n), err
}

// Retry passes the ids as a JSON array, read with json_each.
func (e *sqliteExecutor) Retry(ctx context.Context, p *retryParams) (int, error) {
	ids, _ := json.Marshal(p.IDs)
	query, args := e.q.retryFailed, []any{string(ids)}
	switch {
	case p.From == StatusPermanentFailed && p.All:
		query, args = e.q.retryAllDead, nil
	case p.From == StatusPermanentFailed:
		query = e.q.retryDead
	case p.All:
		query, args = e.q.retryAllFailed, nil
	}
	n, err := execCount(ctx, e.db, query, args...)
	return int(n), err
}

// Insert reads the new id from INSERT … RETURNING; ON CONFLICT DO NOTHING
// returns no row for a key that exists.
func (e *sqliteExecutor) Insert(ctx context.Context, p *insertParams) (int64, bool, error) {
	var id int64
	err := e.db.QueryRowContext(ctx, e.q.insert, p.IdempotencyKey, p.Subject, p.Payload, p.Headers, p.OrderingKey).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return id, true, nil
}

func (e *sqliteExecutor) Stalled(ctx context.Context, p *stalledParams) (bool, error) {
	return queryBool(ctx, e.db, e.q.stalled, sqliteAgo(p.Age))
}

// MayClaim is Stalled available since before a millisecond from now, the
// clock's precision: a row available now, as the claim takes it (exact).
func (e *sqliteExecutor) MayClaim(ctx context.Context) (bool, error) {
	return e.Stalled(ctx, &stalledParams{Age: -time.Millisecond})
}

// MayClaimQuery: none; SQLite claims without probing
// (Capabilities.ProbeBeforeClaim).
func (e *sqliteExecutor) MayClaimQuery() (string, []any, bool) { return "", nil, false }

// BacklogQuery is backlog.sql.
func (e *sqliteExecutor) BacklogQuery() string { return e.q.backlog }

func (e *sqliteExecutor) Purge(ctx context.Context, p *purgeParams) (int, error) {
	n, err := execCount(ctx, e.db, e.q.purge, sqliteAgo(p.OlderThan), p.Limit)
	return int(n), err
}
