package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
)

// Dialect names a kind of database the relay runs on, as DB.Dialect reports
// it and MigrationScript takes it.
type Dialect string

// The dialects, one per driver.
const (
	DialectPostgres Dialect = "postgres"
	DialectMySQL    Dialect = "mysql" // MySQL 8.0.16+ and MariaDB 10.6+
	DialectSQLite   Dialect = "sqlite"
)

// Capabilities is what a database offers beyond the operations every
// driver implements. Code outside the drivers asks for a capability rather
// than comparing dialect names.
type Capabilities struct {
	// SupportsNotify: the table's inserts can notify NotifyChannel
	// (PostgreSQL LISTEN/NOTIFY, the opt-in trigger of NotifyTriggerSQL),
	// so that ListenPostgres can wake the relay before its next poll.
	SupportsNotify bool
	// ConcurrentWrites: several sessions write at once. SQLite has one
	// writer at a time.
	ConcurrentWrites bool
	// TransactionalDDL: a migration and the record of its version commit
	// together. MySQL commits every DDL statement on its own.
	TransactionalDDL bool
	// ProbeBeforeClaim: the claim loop asks Store.MayClaim before claiming
	// again after a claim that was not full, because an empty claim costs
	// the database more than the probe (PostgreSQL 15: about 3.3 ms of
	// backend CPU behind a pooler, where claim.sql is planned at each
	// execution, against 0.4 ms; prepared, on a direct connection, an
	// empty claim cost 0.13–0.78 ms, BENCHMARKS-HISTORY.md 2026-12-01;
	// MariaDB 10.11: the claim's six-branch candidate read against an
	// index dive, or a read of the failed rows while many wait out their
	// backoff; docs/BENCHMARKS.md). Not on SQLite, in process.
	ProbeBeforeClaim bool
}

// driver is one database's side of the outbox: how to open it, render the
// table's statements, run its operations (executor), classify its errors,
// and migrate its schema. A database plugs in with a driver_<name>.go
// implementing it, its SQL in queries/<name>/ and migrations/<name>/, and an
// entry in drivers; the conformance suite (driver_suite_test.go) runs every
// entry against its real database.
type driver interface {
	dialect() Dialect
	capabilities() Capabilities
	// schemes are the URL prefixes OpenSession routes to open.
	schemes() []string
	open(ctx context.Context, rawURL string, s Session) (*DB, error)
	// executor renders the operations' SQL (queries/<dialect>/) for table t
	// in db, which this driver opened.
	executor(db *DB, t tableName) (executor, error)
	// classify says what err, returned by this driver's database, means to
	// the relay; errorOther for an error of another driver.
	classify(err error) errorClass
	// indexName is how the SQL files name an index of table t
	// ({{.Index "suffix"}}).
	indexName(t tableName, suffix string) string
	migrations() migrationSpec
	// writable reports why the database of conn would not accept the
	// relay's writes ("" when it would); see DB.CheckWritable.
	writable(ctx context.Context, conn *sql.Conn) (why string, err error)
	// tables lists the base tables of db (MatchTables): of every schema
	// but the system's, schema-qualified, when qualified; otherwise of
	// the session's current schema, unqualified; each with whether it has
	// the column idempotency_key. schemaLike, when qualified, is a LIKE
	// pattern the schemas it lists may be narrowed to (a superset of
	// those the caller's pattern matches); a driver may list more.
	tables(ctx context.Context, db *sql.DB, qualified bool, schemaLike string) ([]listedTable, error)
	// schemas lists the schemas of db but the system's (MatchSchemas).
	schemas(ctx context.Context, db *sql.DB) ([]string, error)
}

// drivers are the databases the relay runs on, in the order of Dialects.
var drivers = []driver{postgresDriver{}, mysqlDriver{}, sqliteDriver{}}

// Dialects are the dialects of drivers: the database kinds MigrationScript
// accepts, as DB.Dialect reports them.
var Dialects = func() []Dialect {
	out := make([]Dialect, len(drivers))
	for i, d := range drivers {
		out[i] = d.dialect()
	}
	return out
}()

// driverOf returns the driver of dialect d.
func driverOf(d Dialect) (driver, bool) {
	i := slices.IndexFunc(drivers, func(x driver) bool { return x.dialect() == d })
	if i < 0 {
		return nil, false
	}
	return drivers[i], true
}

// migrationSpec is what Migrate and MigrationScript need to know of a
// database beyond its SQL files.
type migrationSpec struct {
	goose goose.Dialect
	// versionTableDDL is the CREATE TABLE goose runs for its version table
	// name (pressly/goose v3.30.0, internal/dialects: postgres.go,
	// mysql.go, sqlite3.go, CreateTable).
	versionTableDDL func(name string) string
	// trueLiteral is how the version table's is_applied = true is written.
	trueLiteral string
	// missingSchema says what to do when the schema that qualifies a
	// table name does not exist.
	missingSchema func(schema string) string
}

// errorClass is what an error of the database means to the relay.
type errorClass int

const (
	// errorOther: none of the below, or an error of another driver.
	errorOther errorClass = iota
	// errorUndefinedTable: the table does not exist (PostgreSQL 42P01,
	// MySQL 1146, SQLite "no such table").
	errorUndefinedTable
	// errorUndefinedColumn: a column does not exist, the schema is behind
	// (PostgreSQL 42703, MySQL 1054, SQLite "no such column").
	errorUndefinedColumn
	// errorUndefinedSchema: the schema that qualifies the table name does
	// not exist (PostgreSQL 3F000; MySQL 1049, a database).
	errorUndefinedSchema
	// errorConflict: a conflict between concurrent transactions, resolved
	// by running again (PostgreSQL 40001 serialization_failure, 40P01
	// deadlock_detected; MySQL 1213 ER_LOCK_DEADLOCK), and a prepared
	// statement whose plan a schema change made stale, also resolved by
	// running again (PostgreSQL 0A000, see planChanged).
	errorConflict
	// errorLockTimeout: a lock wait gave up (PostgreSQL 55P03
	// lock_not_available; MySQL 1205 ER_LOCK_WAIT_TIMEOUT).
	errorLockTimeout
	// errorReadOnly: the session or server refuses writes; the statement
	// did not run (PostgreSQL 25006 read_only_sql_transaction; MySQL 1290
	// ER_OPTION_PREVENTS_STATEMENT under read_only, 1792
	// ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION).
	errorReadOnly
	// errorCredentials: the server refused the session's credentials
	// (PostgreSQL 28P01 invalid_password, 28000
	// invalid_authorization_specification; MySQL 1045
	// ER_ACCESS_DENIED_ERROR, MariaDB 1698 for a user it does not know).
	errorCredentials
)

func (c errorClass) String() string {
	switch c {
	case errorUndefinedTable:
		return "undefined table"
	case errorUndefinedColumn:
		return "undefined column"
	case errorUndefinedSchema:
		return "undefined schema"
	case errorConflict:
		return "conflict"
	case errorLockTimeout:
		return "lock timeout"
	case errorReadOnly:
		return "read-only"
	case errorCredentials:
		return "credentials refused"
	}
	return "other"
}

// classify asks every driver what err means; an error is recognised by the
// driver whose database returned it.
func classify(err error) errorClass {
	if err == nil {
		return errorOther
	}
	for _, d := range drivers {
		if c := d.classify(err); c != errorOther {
			return c
		}
	}
	return errorOther
}

// FailureLevel is the level at which a failed statement that the relay
// retries is logged: WARN for a conflict between concurrent transactions
// (errorConflict), which is resolved by running again, ERROR otherwise.
func FailureLevel(err error) slog.Level {
	if classify(err) == errorConflict {
		return slog.LevelWarn
	}
	return slog.LevelError
}

// IsMissingTable reports whether err says that the table, or the schema
// that qualifies its name, does not exist (PostgreSQL 42P01 or 3F000,
// MySQL 1146 or 1049): dropped, or never made.
func IsMissingTable(err error) bool {
	c := classify(err)
	return c == errorUndefinedTable || c == errorUndefinedSchema
}

// IsLockTimeout reports whether err is a lock wait that gave up
// (errorLockTimeout).
func IsLockTimeout(err error) bool { return classify(err) == errorLockTimeout }

// IsCredentialsRefused reports whether err is the server's refusal of the
// session's user or password (errorCredentials).
func IsCredentialsRefused(err error) bool { return classify(err) == errorCredentials }

// executor runs the operations of one outbox table on one database: one
// method per operation, each taking its parameters in a struct. Store wraps
// its errors and keeps what lives longer than one call (the key cursor).
// Every method is safe for concurrent use. driver_suite_test.go holds the
// contract every executor must pass.
type executor interface {
	// Claim leases up to p.Limit claimable rows to p.Owner within p.MaxBytes
	// and returns them in id order (see Store.ClaimBatch), taking ordering
	// keys in turn from p.Cursor; the result says where the next claim's
	// cursor goes.
	Claim(ctx context.Context, p *claimRowsParams) (claimResult, error)
	// MarkDone settles the rows of p.Done as relayed (or deletes them),
	// fenced by owner, attempt and in_flight; it returns how many changed.
	MarkDone(ctx context.Context, p *markDoneParams) (int64, error)
	// MarkFailed records failed attempts, fenced like MarkDone.
	MarkFailed(ctx context.Context, p *markFailedParams) (int64, error)
	// Requeue moves in_flight rows whose lease started more than
	// p.OlderThan ago (database clock) to failed, claimable now, and
	// returns how many moved. A driver may move a bounded number per call
	// (MySQL: mysqlBatchMax); the rest move at the next call.
	Requeue(ctx context.Context, p *requeueParams) (int, error)
	// Retry makes rows of status p.From (failed or permanent_failed)
	// claimable again; see retryParams.
	Retry(ctx context.Context, p *retryParams) (int, error)
	// Retryable lists the failed and permanent_failed rows in id order.
	Retryable(ctx context.Context) ([]retryableRow, error)
	// CountByStatus counts the rows per status, with the oldest created_at
	// of each, and reads the database clock.
	CountByStatus(ctx context.Context) (statusCounts, error)
	// OldestFailed reads the failed row with the smallest id; false when
	// there is none.
	OldestFailed(ctx context.Context) (RowError, bool, error)
	// RecentErrors lists the p.Limit newest failed and permanent_failed
	// rows, newest first.
	RecentErrors(ctx context.Context, p *recentErrorsParams) ([]RowError, error)
	// RowStatus reads the status of row p.ID; false when there is none.
	RowStatus(ctx context.Context, p *rowStatusParams) (Status, bool, error)
	// RelayedStream reads the stream of a done row of p.Subject; "" when
	// there is none.
	RelayedStream(ctx context.Context, p *relayedStreamParams) (string, error)
	// Insert writes one row and returns its id; inserted is false (and no
	// error) when a row with the idempotency key exists. A value the table
	// cannot hold is refused with an error wrapping ErrInvalidEntry.
	Insert(ctx context.Context, p *insertParams) (id int64, inserted bool, err error)
	// Probe selects every column of the table and no row: an error
	// classified errorUndefinedTable, errorUndefinedColumn or
	// errorUndefinedSchema means the schema is missing or behind.
	Probe(ctx context.Context) error
	// Stalled reports whether a row has been claimable for longer than
	// p.Age (see Store.Stalled).
	Stalled(ctx context.Context, p *stalledParams) (bool, error)
	// MayClaim reports whether a claim may take a row: false only when it
	// would take none; true may still find none (see Store.MayClaim).
	MayClaim(ctx context.Context) (bool, error)
	// MayClaimQuery is a statement that answers as MayClaim does (true
	// whenever MayClaim would; it may also answer true when the claimable
	// rows all wait behind their key's head), and its arguments, for a
	// probe of many tables in one statement (DB.MayClaimEach); ok is false
	// where the database has none (SQLite claims without probing). Every
	// table's arguments are the same.
	MayClaimQuery() (query string, args []any, ok bool)
	// BacklogQuery is backlog.sql: one row, one column, the rows waiting
	// to be relayed now, counted up to BacklogCap; it takes no argument.
	BacklogQuery() string
	// Purge deletes up to p.Limit done rows relayed more than p.OlderThan
	// ago and returns how many.
	Purge(ctx context.Context, p *purgeParams) (int, error)
	// ListRows lists rows of p's statuses, newest first (see browse.go).
	ListRows(ctx context.Context, p *listRowsParams) ([]RowSummary, error)
	// RowDetail reads one row whole but for its payload, of which it reads
	// p.PreviewBytes; false when there is none.
	RowDetail(ctx context.Context, p *rowDetailParams) (RowDetail, bool, error)
	// ErrorGroups groups the p.Scan newest failed and dead-letter rows by
	// status, subject and the start of last_error.
	ErrorGroups(ctx context.Context, p *errorGroupsParams) ([]ErrorGroup, error)
	// replayExecutor: the reads and the record of bridge replay (replay.go).
	replayExecutor
}

// claimRowsParams are the parameters of executor.Claim.
type claimRowsParams struct {
	ClaimParams
	// Cursor is the ordering key after which the claim looks for the heads
	// of ordering keys first (Store's key cursor).
	Cursor string
}

// claimResult is what executor.Claim returns.
type claimResult struct {
	// Rows are the claimed rows, in id order.
	Rows []Row
	// NextCursor is where the next claim starts among ordering keys; not
	// Valid: the cursor stays where it is.
	NextCursor sql.NullString
}

// markDoneParams are the parameters of executor.MarkDone.
type markDoneParams struct {
	Owner string
	Done  []Done
	// Delete deletes the rows instead (relay.delete_on_relay).
	Delete bool
}

// markFailedParams are the parameters of executor.MarkFailed.
type markFailedParams struct {
	Owner    string
	Failures []Failure
}

// requeueParams are the parameters of executor.Requeue.
type requeueParams struct {
	OlderThan time.Duration
}

// retryParams are the parameters of executor.Retry: the rows of status
// From among IDs, or all of them when All. A permanent_failed row becomes
// pending with attempts 0, available now; a failed row becomes available
// now, attempts kept. Rows of another status are left alone.
type retryParams struct {
	From Status // StatusFailed or StatusPermanentFailed
	IDs  []int64
	All  bool
}

// retryableRow is one row of executor.Retryable.
type retryableRow struct {
	ID      int64
	Subject string
	Status  Status
}

// statusCounts is what executor.CountByStatus returns.
type statusCounts struct {
	Rows []statusCount
	// Now is the database clock.
	Now time.Time
}

// statusCount is the rows of one status.
type statusCount struct {
	Status Status
	Count  int64
	// Oldest is the smallest created_at among them.
	Oldest time.Time
}

// recentErrorsParams are the parameters of executor.RecentErrors.
type recentErrorsParams struct {
	Limit int
}

// rowStatusParams are the parameters of executor.RowStatus.
type rowStatusParams struct {
	ID int64
}

// relayedStreamParams are the parameters of executor.RelayedStream.
type relayedStreamParams struct {
	Subject string
}

// insertParams are the parameters of executor.Insert, validated by
// Store.Enqueue.
type insertParams struct {
	IdempotencyKey string
	Subject        string
	Payload        []byte
	// Headers is a JSON object.
	Headers     string
	OrderingKey sql.NullString
}

// stalledParams are the parameters of executor.Stalled.
type stalledParams struct {
	Age time.Duration
}

// purgeParams are the parameters of executor.Purge.
type purgeParams struct {
	OlderThan time.Duration
	Limit     int
}

// querier runs statements: the pool (*sql.DB) or a transaction (*sql.Tx).
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// keyWindow is how many ordering keys a claim of limit rows walks at most
// in each of its two laps (after the cursor, then from the first key up to
// it) on PostgreSQL and SQLite. The walk stops earlier once it has limit
// claimable heads; the window bounds what a claim costs when most keys are
// held back (heads in flight or waiting out a backoff): one index descent
// per key, 1.1–1.3 s per claim on PostgreSQL with 100,000 held-back keys
// before the bound (docs/BENCHMARKS.md).
func keyWindow(limit int) int { return 4 * limit }

// jumpKeyCursor is where the cursor goes after a claim that took no row
// with an ordering key after it (in the lap from the cursor on): to the
// window-th key after it, so that the next claim walks the keys beyond a
// window of held-back ones, or back to the first key when fewer keys
// follow (the next claim walks from the start). Without it, a window of
// held-back keys kept every key after it waiting — also when a busy key
// before the cursor was claimed at every claim, in the lap from the first
// key, and set the cursor back to itself
// (TestClaimPassesHeldBackKeysWhileAnEarlyKeyStaysBusy). A failed query
// leaves the cursor where it is (not Valid): the rows are claimed by then
// and must reach the relay, and the next claim tries again. jump takes the
// cursor and the window and returns the key, or no row.
func jumpKeyCursor(ctx context.Context, db querier, jump, from string, window int) sql.NullString {
	var k string
	err := db.QueryRowContext(ctx, jump, from, window).Scan(&k)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		k = ""
	case err != nil:
		return sql.NullString{}
	}
	return sql.NullString{String: k, Valid: true}
}

// scanClaimed reads and closes the result of a claim: id,
// idempotency_key, subject, payload (NULL when left out), headers,
// ordering_key, attempts, created_at, claimed_at, first_claimed_at, the
// payload's length, then one more column into each of extra (the same on
// every row). A payload longer than maxPayload was left out. size, when not
// nil, holds the number of rows once the first is scanned (set by the
// caller, or one of extra: a column of the claim), so that the result is
// allocated once. It returns the rows in id order.
//
// A claim's scan is on the relay's hot path: every row is scanned into one
// Row and copied out, so that a row costs the driver's values and no
// allocation of its own (bridge-bench --memprofile).
func scanClaimed(rows *sql.Rows, maxPayload int64, size *int64, extra ...any) ([]Row, error) {
	defer rows.Close()
	var out []Row
	var r Row
	var headers sql.NullString
	dest := append([]any{&r.ID, &r.IdempotencyKey, &r.Subject, &r.Payload, &headers, &r.OrderingKey,
		&r.Attempt, dbTime{&r.CreatedAt}, dbTime{&r.ClaimedAt}, dbTime{&r.FirstClaimedAt}, &r.PayloadSize}, extra...)
	for rows.Next() {
		r = Row{}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		switch {
		case r.PayloadSize > maxPayload:
			r.Payload, r.PayloadLeftOut = nil, true
		case r.Payload == nil:
			r.Payload = []byte{}
		}
		r.Headers = []byte(headers.String)
		if out == nil && size != nil {
			out = make([]Row, 0, max(*size, 1))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Row) int { return int(a.ID - b.ID) })
	return out, nil
}

// execCount runs one statement that changes rows and returns how many it
// changed.
func execCount(ctx context.Context, q querier, query string, args ...any) (int64, error) {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryCountByStatus runs a statement returning status, count, oldest
// created_at and the database clock, one row per status.
func queryCountByStatus(ctx context.Context, q querier, query string) (statusCounts, error) {
	var out statusCounts
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	for rows.Next() {
		var c statusCount
		var status string
		if err := rows.Scan(&status, &c.Count, dbTime{&c.Oldest}, dbTime{&out.Now}); err != nil {
			return out, fmt.Errorf("scan: %w", err)
		}
		c.Status = Status(status)
		out.Rows = append(out.Rows, c)
	}
	return out, rows.Err()
}

// queryOldestFailed runs a statement returning id, subject, attempts,
// last_error, created_at and the database clock of at most one row.
func queryOldestFailed(ctx context.Context, q querier, query string) (RowError, bool, error) {
	var e RowError
	var msg sql.NullString
	var created, now time.Time
	err := q.QueryRowContext(ctx, query).Scan(&e.ID, &e.Subject, &e.Attempts, &msg, dbTime{&created}, dbTime{&now})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return e, false, nil
	case err != nil:
		return e, false, err
	}
	e.Status, e.LastError, e.Age = StatusFailed, msg.String, max(now.Sub(created), 0)
	return e, true, nil
}

// queryRecentErrors runs a statement returning id, status, attempts,
// last_error.
func queryRecentErrors(ctx context.Context, q querier, query string, args ...any) ([]RowError, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []RowError
	for rows.Next() {
		var e RowError
		var msg sql.NullString
		if err := rows.Scan(&e.ID, &e.Status, &e.Attempts, &msg); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		e.LastError = msg.String
		out = append(out, e)
	}
	return out, rows.Err()
}

// readers runs the read-only statements every driver executes the same
// way, one query through database/sql each; only their SQL, from the
// driver's queries/<dialect>/ files, differs. Executors embed it for
// Retryable, CountByStatus, OldestFailed, RecentErrors, RowStatus,
// RelayedStream and Probe.
type readers struct {
	sql                                           *sql.DB
	retryable, countByStatus, oldestFailed        string
	recentErrors, rowStatus, relayedStream, probe string
	browse                                        browseQueries
	replayReaders
}

// takeReaders takes the readers' statements from f.
func takeReaders(db *sql.DB, f *queryFiles) readers {
	return readers{
		sql:           db,
		retryable:     f.take("retryable"),
		countByStatus: f.take("count_by_status"),
		oldestFailed:  f.take("oldest_failed"),
		recentErrors:  f.take("recent_errors"),
		rowStatus:     f.take("row_status"),
		relayedStream: f.take("relayed_stream"),
		probe:         f.take("probe"),
		browse:        takeBrowseQueries(f),
		replayReaders: takeReplayReaders(db, f),
	}
}

func (r readers) Retryable(ctx context.Context) ([]retryableRow, error) {
	return queryRetryable(ctx, r.sql, r.retryable)
}

func (r readers) CountByStatus(ctx context.Context) (statusCounts, error) {
	return queryCountByStatus(ctx, r.sql, r.countByStatus)
}

func (r readers) OldestFailed(ctx context.Context) (RowError, bool, error) {
	return queryOldestFailed(ctx, r.sql, r.oldestFailed)
}

func (r readers) RecentErrors(ctx context.Context, p *recentErrorsParams) ([]RowError, error) {
	return queryRecentErrors(ctx, r.sql, r.recentErrors, p.Limit)
}

func (r readers) RowStatus(ctx context.Context, p *rowStatusParams) (Status, bool, error) {
	s, ok, err := queryOptionalString(ctx, r.sql, r.rowStatus, p.ID)
	return Status(s), ok, err
}

func (r readers) RelayedStream(ctx context.Context, p *relayedStreamParams) (string, error) {
	s, _, err := queryOptionalString(ctx, r.sql, r.relayedStream, p.Subject)
	return s, err
}

func (r readers) Probe(ctx context.Context) error { return probe(ctx, r.sql, r.probe) }

// queryRetryable runs a statement returning id, subject, status.
func queryRetryable(ctx context.Context, q querier, query string) ([]retryableRow, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []retryableRow
	for rows.Next() {
		var r retryableRow
		var status string
		if err := rows.Scan(&r.ID, &r.Subject, &status); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		r.Status = Status(status)
		out = append(out, r)
	}
	return out, rows.Err()
}

// queryOptionalString runs a statement returning one string column of at
// most one row; false when there is no row.
func queryOptionalString(ctx context.Context, q querier, query string, args ...any) (string, bool, error) {
	var s string
	err := q.QueryRowContext(ctx, query, args...).Scan(&s)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return s, true, nil
}

// queryBool runs a statement returning one boolean.
func queryBool(ctx context.Context, q querier, query string, args ...any) (bool, error) {
	var b bool
	err := q.QueryRowContext(ctx, query, args...).Scan(&b)
	return b, err
}

// probe runs the probe statement and closes its empty result.
func probe(ctx context.Context, q querier, query string) error {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	return rows.Close()
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// Schemes are the URL prefixes of every driver, in the order of Dialects:
// postgres://, postgresql://, mysql://, sqlite:. Configuration checks a
// database URL against these, so that the schemes are listed here only.
var Schemes = func() []string {
	var out []string
	for _, d := range drivers {
		out = append(out, d.schemes()...)
	}
	return out
}()

// SchemeOf returns the scheme of Schemes that rawURL starts with and its
// dialect, or false when it starts with none.
func SchemeOf(rawURL string) (scheme string, d Dialect, ok bool) {
	dr, scheme, ok := driverOfURL(rawURL)
	if !ok {
		return "", "", false
	}
	return scheme, dr.dialect(), true
}

// driverOfURL returns the driver whose scheme rawURL starts with, and the
// scheme.
func driverOfURL(rawURL string) (driver, string, bool) {
	for _, d := range drivers {
		for _, scheme := range d.schemes() {
			if strings.HasPrefix(rawURL, scheme) {
				return d, scheme, true
			}
		}
	}
	return nil, "", false
}

// SQLiteURL is the database URL of the SQLite file at path.
func SQLiteURL(path string) string { return sqliteDriver{}.schemes()[0] + path }

// SQLitePath returns the path of a SQLite database URL (without its scheme
// and a leading "//"), or false when rawURL is not SQLite's.
func SQLitePath(rawURL string) (string, bool) {
	path, ok := strings.CutPrefix(rawURL, sqliteDriver{}.schemes()[0])
	if !ok {
		return "", false
	}
	return strings.TrimPrefix(path, "//"), true
}

// HoldsMySQLDSN reports whether the MySQL URL rawURL holds a go-sql-driver
// DSN with a protocol after its scheme: [user[:password]@]tcp(address)/… or
// unix(path), which the driver parses when the database opens.
func HoldsMySQLDSN(rawURL string) bool {
	dsn, ok := strings.CutPrefix(rawURL, mysqlDriver{}.schemes()[0])
	return ok && isMySQLDSN(dsn)
}
