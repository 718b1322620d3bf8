package outbox

import (
	"context"
	"embed"
	"time"

	"github.com/pressly/goose/v3"
)

//go:embed migrations
var migrationFiles embed.FS

// dialect holds what differs between databases: SQL text, batch marks and
// error codes. A reader finds a database's SQL in dialect_<name>.go.
type dialect interface {
	name() string
	goose() goose.Dialect
	// indexName is how CREATE INDEX names an index of table t.
	indexName(t tableName, suffix string) string
	// sqlFor renders the statements for table t.
	sqlFor(t tableName) statements
	// claim leases claimable rows as p says (Store.ClaimBatch) and returns
	// them in id order; cursor is the store's position among ordering
	// keys, which the dialect may read and move.
	claim(ctx context.Context, db *DB, s *statements, p ClaimParams, cursor *keyCursor) ([]Row, error)
	// requeue moves in_flight rows whose lease started more than olderThan
	// ago (database clock) to failed and returns how many moved.
	requeue(ctx context.Context, db *DB, s *statements, olderThan time.Duration) (int, error)
	markDone(ctx context.Context, db *DB, s *statements, owner string, done []Done, del bool) (int64, error)
	markFailed(ctx context.Context, db *DB, s *statements, owner string, failures []Failure) (int64, error)
	isUndefinedTable(err error) bool
	// ago is the parameter for "now minus d" in this dialect's SQL.
	ago(d time.Duration) any
	// idList is the parameter for a list of ids.
	idList(ids []int64) any
}

// statements are the rendered SQL of one table. Placeholders are the
// dialect's own ($1 or ?).
type statements struct {
	// claim is the claim, run by the dialect's claim method: its
	// parameters and statements differ by dialect.
	claim string
	// jump(cursor, window) returns the window-th ordering key with
	// unsettled rows after cursor, or no row (PostgreSQL and SQLite; see
	// jumpKeyCursor).
	jump string
	// requeue is the in-flight recovery, run by the dialect's requeue
	// method.
	requeue string
	// stats() returns status, count, oldest created_at, and the database now.
	stats string
	// recentErrors(limit) returns id, status, attempts, last_error.
	recentErrors string
	// insert(key, subject, payload, headers, ordering_key) returns id, or no row when the key exists.
	insert string
	// probe selects every column of the table and no row.
	probe string
	// retryIDs(ids) and retryAll() put permanent_failed rows back to pending.
	retryIDs, retryAll string
	// retryFailedIDs(ids) and retryAllFailed() make failed rows claimable
	// now (available_at = now), attempts kept.
	retryFailedIDs, retryAllFailed string
	// retryable() returns id, subject, status of the failed and
	// permanent_failed rows, in id order.
	retryable string
	// oldestFailed() returns id, subject, attempts, last_error, created_at
	// of the failed row with the smallest id, and the database now.
	oldestFailed string
	// stalled(ago) returns whether a row is claimable (pending or failed,
	// no earlier unsettled row of its ordering key) whose available_at is
	// before ago.
	stalled string
	// purge(ago, limit) deletes up to limit done rows relayed before ago.
	purge string
	// markDone, deleteDone, markFailed are per-row statements for dialects
	// without array parameters, or batch statements with them.
	markDone, deleteDone, markFailed string
}

const columnList = "id, idempotency_key, subject, payload, headers, ordering_key, status, attempts, last_error, owner, available_at, claimed_at, first_claimed_at, created_at, relayed_at, stream, stream_seq"

func micros(d time.Duration) int64 { return d.Microseconds() }

// retrySet is the assignment that gives a dead letter a fresh start.
const retrySet = `status = 'pending', attempts = 0, owner = NULL, available_at = `
