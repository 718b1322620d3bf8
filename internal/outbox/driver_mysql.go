package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"
)

// mysqlDriver targets MySQL 8.0.16+ and MariaDB 10.6+ (InnoDB, FOR UPDATE
// SKIP LOCKED, enforced CHECK constraints, expression defaults, JSON_TABLE).
// Neither has UPDATE … RETURNING, so a claim is a short READ COMMITTED
// transaction of four statements (see mysqlExecutor.Claim), and Insert
// reads the new id from the INSERT's result. Marks are one UPDATE per batch
// whose per-row values come from CASE id WHEN … arms. Its statements are
// queries/mysql/*.sql.
//
// Every statement that locks rows finds them by primary key (FORCE INDEX
// (PRIMARY)); rows are chosen beforehand by non-locking reads. An UPDATE
// driven by a secondary index locks every index record it scans, including
// rows other relays are changing at that moment: it waits for them and can
// deadlock with them.
//
// Times are DATETIME(6) in UTC from UTC_TIMESTAMP(6), the database clock,
// whatever the session time zone.
type mysqlDriver struct{}

var _ driver = mysqlDriver{}

// mysqlKeyMax is the longest idempotency or ordering key the MySQL table
// holds, in bytes (VARBINARY(255), see migrations/mysql).
const mysqlKeyMax = 255

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

func (mysqlDriver) dialect() Dialect { return DialectMySQL }

func (mysqlDriver) capabilities() Capabilities {
	return Capabilities{ConcurrentWrites: true, ProbeBeforeClaim: true}
}

func (mysqlDriver) schemes() []string { return []string{"mysql://"} }

func (mysqlDriver) open(ctx context.Context, rawURL string, s Session) (*DB, error) {
	return openMySQL(ctx, rawURL, s)
}

// MySQL index names are per table (and at most 64 bytes), so they do not
// repeat the table name.
func (mysqlDriver) indexName(_ tableName, suffix string) string { return suffix + "_idx" }

func (mysqlDriver) migrations() migrationSpec {
	return migrationSpec{
		goose: goose.DialectMySQL,
		versionTableDDL: func(name string) string {
			return "CREATE TABLE " + name + " (\n    id bigint(20) unsigned NOT NULL AUTO_INCREMENT,\n    version_id bigint NOT NULL,\n    is_applied boolean NOT NULL,\n    tstamp datetime NULL default CURRENT_TIMESTAMP,\n    PRIMARY KEY(id)\n)"
		},
		trueLiteral: "true",
		missingSchema: func(schema string) string {
			return fmt.Sprintf("database %q does not exist (MySQL compares database names by case unless lower_case_table_names is set); create it first (CREATE DATABASE %s) or use an unqualified table name", schema, schema)
		},
	}
}

// classify reads the server's error number (MySQL Server Error Message
// Reference; MariaDB uses the same numbers).
func (mysqlDriver) classify(err error) errorClass {
	switch mysqlCode(err) {
	case 1146: // ER_NO_SUCH_TABLE
		return errorUndefinedTable
	case 1054: // ER_BAD_FIELD_ERROR: unknown column
		return errorUndefinedColumn
	case 1049: // ER_BAD_DB_ERROR: unknown database
		return errorUndefinedSchema
	case 1213: // ER_LOCK_DEADLOCK
		return errorConflict
	case 1205: // ER_LOCK_WAIT_TIMEOUT
		return errorLockTimeout
	case 1290, 1792: // ER_OPTION_PREVENTS_STATEMENT (read_only), ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
		return errorReadOnly
	case 1045, 1698: // ER_ACCESS_DENIED_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR (MariaDB, an unknown user): user or password refused
		return errorCredentials
	}
	return errorOther
}

// writable: the server does not run with read_only (which super_read_only
// also sets).
func (mysqlDriver) writable(ctx context.Context, conn *sql.Conn) (string, error) {
	var readOnly bool
	if err := conn.QueryRowContext(ctx, "SELECT @@global.read_only").Scan(&readOnly); err != nil {
		return "", err
	}
	if readOnly {
		return "the server runs with read_only", nil
	}
	return "", nil
}

func mysqlCode(err error) uint16 {
	var e *mysql.MySQLError
	if errors.As(err, &e) {
		return e.Number
	}
	return 0
}

// mysqlExecutor runs the operations of one table on MySQL or MariaDB.
type mysqlExecutor struct {
	readers
	db *sql.DB
	// txOptions begin the claim's and the in-flight recovery's
	// transactions: nil when the sessions run at READ COMMITTED already
	// (openMySQL set it), else READ COMMITTED, which costs a statement
	// (SET TRANSACTION) per transaction.
	txOptions *sql.TxOptions
	q         mysqlQueries
	// binlog are the mysql-binlog source's statements (Store.BinlogStatements).
	binlog BinlogStatements
}

// mysqlQueries are the statements of queries/mysql/, rendered for one
// table; each file says its parameters. The claim and the in-flight
// recovery are transactions of several statements, one file each.
type mysqlQueries struct {
	claimCandidates, claimLock, claimLease, claimRead string
	requeueStale, requeueLock, requeueMove            string
	markDone, deleteDone, markFailed                  string
	insert                                            string
	retryDead, retryAllDead                           string
	retryFailed, retryAllFailed                       string
	stalled, mayClaim, backlog, purge                 string
}

// mysqlSystemSchemas are the server's own databases.
const mysqlSystemSchemas = `('mysql', 'information_schema', 'performance_schema', 'sys')`

// tables narrows the listing to the schemas LIKE schemaLike: MariaDB reads
// information_schema by opening the directories and table definitions of
// the databases it lists, which took more than 5 s over about 150
// databases on a busy 2-core machine, and it uses a constant LIKE on
// table_schema to open only those that match.
func (mysqlDriver) tables(ctx context.Context, db *sql.DB, qualified bool, schemaLike string) ([]listedTable, error) {
	schema, where, args := "''", "t.table_schema = DATABASE()", []any(nil)
	if qualified {
		schema, where = "t.table_schema", "t.table_schema NOT IN "+mysqlSystemSchemas+" AND t.table_schema LIKE ?"
		args = []any{schemaLike}
	}
	return listTables(ctx, db, `SELECT `+schema+`, t.table_name,
			EXISTS (SELECT 1 FROM information_schema.columns k
				WHERE k.table_schema = t.table_schema AND k.table_name = t.table_name AND k.column_name = 'idempotency_key')
		FROM information_schema.tables t WHERE t.table_type = 'BASE TABLE' AND `+where, args...)
}

func (mysqlDriver) schemas(ctx context.Context, db *sql.DB) ([]string, error) {
	return listStrings(ctx, db, `SELECT schema_name FROM information_schema.schemata WHERE schema_name NOT IN `+mysqlSystemSchemas)
}

func (d mysqlDriver) executor(db *DB, t tableName) (executor, error) {
	f, err := loadQueries(d, t)
	if err != nil {
		return nil, err
	}
	e := &mysqlExecutor{readers: takeReaders(db.SQL, f), db: db.SQL, txOptions: db.mysqlTxOptions, q: mysqlQueries{
		claimCandidates: f.take("claim_candidates"), claimLock: f.take("claim_lock"), claimLease: f.take("claim_lease"), claimRead: f.take("claim_read"),
		requeueStale: f.take("requeue_stale"), requeueLock: f.take("requeue_lock"), requeueMove: f.take("requeue_move"),
		markDone: f.take("mark_done"), deleteDone: f.take("delete_done"), markFailed: f.take("mark_failed"),
		insert:    f.take("insert"),
		retryDead: f.take("retry_dead"), retryAllDead: f.take("retry_all_dead"),
		retryFailed: f.take("retry_failed"), retryAllFailed: f.take("retry_all_failed"),
		stalled: f.take("stalled"), mayClaim: f.take("may_claim"), backlog: f.take("backlog"), purge: f.take("purge"),
	}, binlog: takeBinlogStatements(f)}
	return e, f.done()
}

// mysqlCandidateArgs are the parameters of claim_candidates.sql, in the
// order they appear: want rows without key, want keys from the key cursor on.
func mysqlCandidateArgs(cursor string, want int) []any {
	args := []any{want, want}
	for range 4 {
		args = append(args, cursor, want)
	}
	return append(args, want)
}

// mysqlCandidateSet is what claim_candidates.sql found.
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

// readMySQLCandidates runs claim_candidates.sql from cursor for a claim of
// limit rows and keeps, of what it finds, the ready heads of the first
// keys in walk order (at most limit) and the rows without key, at most
// want = limit × mysqlOverfetch rows in id order. Heads are taken in walk
// order, not by id: the head of a key that got a row only now has a larger
// id than the heads of keys around it that keep failing and coming back,
// and by id it would lose to them on every claim.
func readMySQLCandidates(ctx context.Context, db *sql.DB, query, cursor string, limit int) (mysqlCandidateSet, error) {
	var c mysqlCandidateSet
	want := limit * mysqlOverfetch
	rows, err := db.QueryContext(ctx, query, mysqlCandidateArgs(cursor, want)...)
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

// Claim leases up to p.Limit rows to p.Owner, one statement file per step,
// steps 2 to 4 in one READ COMMITTED transaction that is begun only when
// step 1 found candidates (an idle relay's claim is one statement):
//
//  1. candidates: a plain (non-locking) SELECT of the claimable rows,
//     ordering condition included (claim_candidates.sql, readMySQLCandidates):
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
//  2. lock (claim_lock.sql): SELECT … FOR UPDATE SKIP LOCKED of those candidates by primary
//     key, re-checking status and available_at on the latest committed
//     version: a candidate that another relay claimed (or claimed and
//     settled) since step 1 is skipped or no longer matches. The ordering
//     condition needs no re-check: an earlier row of the key was done or
//     permanent_failed at step 1 and only a producer's late commit or
//     `bridge retry` can make it unsettled again — the same window as the
//     PostgreSQL claim, whose subquery also reads a statement snapshot.
//  3. lease (claim_lease.sql): the locked rows become in_flight under owner.
//  4. read (claim_read.sql): the claimed rows.
//
// READ COMMITTED: every statement reads the newest committed data, and
// InnoDB takes no gap locks, so the claim does not block producers' inserts.
// SKIP LOCKED never waits, so two claims cannot deadlock.
func (e *mysqlExecutor) Claim(ctx context.Context, p *claimRowsParams) (_ claimResult, err error) {
	maxBytes, maxPayload := p.sizeParams()
	// A statement of its own: at READ COMMITTED it reads what it would read
	// inside the transaction, the newest committed rows.
	found, err := readMySQLCandidates(ctx, e.db, e.q.claimCandidates, p.Cursor, p.Limit)
	if err != nil {
		return claimResult{}, fmt.Errorf("select candidates: %w", err)
	}
	candidates := found.ids
	if len(candidates) == 0 {
		return claimResult{NextCursor: found.nextCursor(p.Cursor, nil)}, nil
	}
	tx, err := e.db.BeginTx(ctx, e.txOptions)
	if err != nil {
		return claimResult{}, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	args := append(append([]any{maxPayload}, anys(candidates)...), p.Limit)
	locked, err := mysqlFitting(ctx, tx, mysqlExpand(e.q.claimLock, len(candidates)), maxBytes, args...)
	if err != nil {
		return claimResult{}, fmt.Errorf("lock candidates: %w", err)
	}
	var out []Row
	if len(locked) > 0 {
		ids := anys(locked)
		if _, err := tx.ExecContext(ctx, mysqlExpand(e.q.claimLease, len(locked)), append([]any{p.Owner}, ids...)...); err != nil {
			return claimResult{}, fmt.Errorf("lease: %w", err)
		}
		rows, err := tx.QueryContext(ctx, mysqlExpand(e.q.claimRead, len(locked)), append([]any{maxPayload}, ids...)...)
		if err != nil {
			return claimResult{}, err
		}
		size := int64(len(locked))
		if out, err = scanClaimed(rows, maxPayload, &size); err != nil {
			return claimResult{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return claimResult{}, fmt.Errorf("commit: %w", err)
	}
	return claimResult{Rows: out, NextCursor: found.nextCursor(p.Cursor, out)}, nil
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

// Requeue runs the in-flight recovery (requeue_stale.sql, requeue_lock.sql,
// requeue_move.sql), at most mysqlBatchMax rows per call: a longer list is
// worked off over the next calls. The stale leases are read by a statement
// of its own (a non-locking read, as it would be inside the transaction);
// only when there are some are they locked and moved, in one READ
// COMMITTED transaction. A stale row locked by another transaction (a relay
// paused in the middle of a mark) is skipped, not waited for, and found
// again next time.
func (e *mysqlExecutor) Requeue(ctx context.Context, p *requeueParams) (_ int, err error) {
	ago := micros(p.OlderThan)
	stale, err := mysqlIDList(ctx, e.db, e.q.requeueStale, ago, mysqlBatchMax)
	if err != nil {
		return 0, fmt.Errorf("select stale leases: %w", err)
	}
	if len(stale) == 0 {
		return 0, nil
	}
	tx, err := e.db.BeginTx(ctx, e.txOptions)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var n int64
	locked, err := mysqlIDList(ctx, tx, mysqlExpand(e.q.requeueLock, len(stale)), append(anys(stale), ago)...)
	if err != nil {
		return 0, fmt.Errorf("lock stale leases: %w", err)
	}
	if len(locked) > 0 {
		if n, err = execCount(ctx, tx, mysqlExpand(e.q.requeueMove, len(locked)), anys(locked)...); err != nil {
			return 0, fmt.Errorf("requeue: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return int(n), nil
}

func mysqlIDList(ctx context.Context, q querier, query string, args ...any) ([]int64, error) {
	rows, err := q.QueryContext(ctx, query, args...)
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

// Insert reads the new id from the INSERT's result. Keys longer than the
// table's columns are refused here with a message naming the limit.
func (e *mysqlExecutor) Insert(ctx context.Context, p *insertParams) (int64, bool, error) {
	if key := p.IdempotencyKey; len(key) > mysqlKeyMax {
		return 0, false, fmt.Errorf("%w: idempotency key %.40q… is %d bytes; a MySQL/MariaDB outbox holds keys of at most %d bytes", ErrInvalidEntry, key, len(key), mysqlKeyMax)
	}
	if ok := p.OrderingKey; len(ok.String) > mysqlKeyMax {
		return 0, false, fmt.Errorf("%w: ordering key %.40q… is %d bytes; a MySQL/MariaDB outbox holds keys of at most %d bytes", ErrInvalidEntry, ok.String, len(ok.String), mysqlKeyMax)
	}
	res, err := e.db.ExecContext(ctx, e.q.insert, p.IdempotencyKey, p.Subject, p.Payload, p.Headers, p.OrderingKey)
	if err != nil {
		return 0, false, err
	}
	// Rows affected are rows changed: openMySQL turns clientFoundRows off.
	n, err := res.RowsAffected()
	if err != nil {
		return 0, false, err
	}
	if n == 0 {
		return 0, false, nil
	}
	id, err := res.LastInsertId()
	return id, err == nil, err
}

// MarkDone writes one statement per group of at most mysqlBatchMax rows
// (mysqlEach).
func (e *mysqlExecutor) MarkDone(ctx context.Context, p *markDoneParams) (int64, error) {
	done, owner, del := p.Done, p.Owner, p.Delete
	return mysqlEach(ctx, e.db, len(done), func(i int) int64 { return done[i].ID }, func(idx []int) (string, []any) {
		var ids, attempts, streams, seqs []any
		for _, i := range idx {
			d := done[i]
			ids = append(ids, d.ID)
			attempts = append(attempts, d.ID, d.Attempt)
			streams = append(streams, d.ID, d.Stream)
			seqs = append(seqs, d.ID, int64(d.Seq))
		}
		if del {
			return mysqlExpand(e.q.deleteDone, len(idx)), concat(ids, attempts, []any{owner})
		}
		return mysqlExpand(e.q.markDone, len(idx)), concat(streams, seqs, ids, attempts, []any{owner})
	})
}

// MarkFailed writes like MarkDone.
func (e *mysqlExecutor) MarkFailed(ctx context.Context, p *markFailedParams) (int64, error) {
	failures, owner := p.Failures, p.Owner
	return mysqlEach(ctx, e.db, len(failures), func(i int) int64 { return failures[i].ID }, func(idx []int) (string, []any) {
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
		return mysqlExpand(e.q.markFailed, len(idx)), concat(statuses, errs, delays, refunds, ids, attempts, []any{owner})
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

// Retry passes the ids as a JSON array, read with JSON_TABLE.
func (e *mysqlExecutor) Retry(ctx context.Context, p *retryParams) (int, error) {
	ids := p.IDs
	if ids == nil {
		ids = []int64{}
	}
	list, _ := json.Marshal(ids)
	query, args := e.q.retryFailed, []any{string(list)}
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

// Stalled passes the age in microseconds.
func (e *mysqlExecutor) Stalled(ctx context.Context, p *stalledParams) (bool, error) {
	return queryBool(ctx, e.db, e.q.stalled, micros(p.Age))
}

// MayClaim asks may_claim.sql: any pending row, or failed one past its
// backoff, ordering keys aside.
func (e *mysqlExecutor) MayClaim(ctx context.Context) (bool, error) {
	return queryBool(ctx, e.db, e.q.mayClaim)
}

// MayClaimQuery is may_claim.sql, which takes no argument.
func (e *mysqlExecutor) MayClaimQuery() (string, []any, bool) { return e.q.mayClaim, nil, true }

// BacklogQuery is backlog.sql.
func (e *mysqlExecutor) BacklogQuery() string { return e.q.backlog }

// Purge passes the age in microseconds.
func (e *mysqlExecutor) Purge(ctx context.Context, p *purgeParams) (int, error) {
	n, err := execCount(ctx, e.db, e.q.purge, micros(p.OlderThan), p.Limit)
	return int(n), err
}
