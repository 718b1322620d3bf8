package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// ErrNoTable is returned (wrapped) when the outbox table or one of its
// columns does not exist: the schema was never migrated.
var ErrNoTable = errors.New("outbox table missing or not migrated")

// Store runs the outbox table's operations through the driver of its
// database (see driver.go). It is safe for concurrent use.
type Store struct {
	db    *DB
	table tableName
	exec  executor
	heads keyCursor
}

// keyCursor is the ordering key after which the next claim of this store
// looks for the heads of ordering keys first (claimRowsParams.Cursor).
type keyCursor struct {
	mu  sync.Mutex
	key string
}

func (c *keyCursor) get() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.key
}

// set moves the cursor; a claim that says nothing of it
// (claimResult.NextCursor not Valid) leaves it.
func (c *keyCursor) set(key sql.NullString) {
	if !key.Valid {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.key = key.String
}

// NewStore returns a Store for table (an SQL identifier, optionally
// schema-qualified) in db. It does not touch the database; see CheckSchema.
func NewStore(db *DB, table string) (*Store, error) {
	t, err := ParseTableName(table)
	if err != nil {
		return nil, err
	}
	ex, err := db.driver.executor(db, t)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, table: t, exec: ex}, nil
}

// Table is the table name as configured.
func (s *Store) Table() string { return s.table.String() }

// Gone reports whether the table no longer exists: a statement naming it
// fails as an undefined table. A write that failed with a missing-table
// error (IsMissingTable) may have met another missing relation (a trigger's
// table, a search_path changed): Gone tells the table's own. Errors: the
// statement's, other than an undefined table.
func (s *Store) Gone(ctx context.Context) (bool, error) {
	exists, err := relationExists(ctx, s.db.SQL, s.db.driver, s.table.String())
	return !exists && err == nil, err
}

// DB is the database the store reads.
func (s *Store) DB() *DB { return s.db }

// CheckSchema verifies that the table exists with every column of the
// contract. Errors: ErrNoTable (wrapped, saying to run `bridge migrate`).
func (s *Store) CheckSchema(ctx context.Context) error {
	err := s.exec.Probe(ctx)
	if err == nil {
		return nil
	}
	switch s.db.driver.classify(err) {
	case errorUndefinedTable, errorUndefinedColumn, errorUndefinedSchema:
		return fmt.Errorf("%w: table %q in %s: %v; create it with `bridge migrate` (same --database-url and --table)", ErrNoTable, s.table.String(), s.db.Redacted, err)
	}
	return fmt.Errorf("check outbox table %s: %w", s.table, err)
}

// ClaimParams are the parameters of a claim.
type ClaimParams struct {
	// Owner is the relay the rows are leased to. Required.
	Owner string
	// Limit is the most rows the claim takes. Required.
	Limit int
	// MaxBytes bounds what the claimed rows hold in memory: their payloads
	// (those read) and headers, as the database counts them. The claim
	// takes rows in id order and stops before the first row that would
	// pass it; the first row is taken whatever its size, so that a row
	// larger than the bound is relayed too. 0 means no bound.
	MaxBytes int64
	// MaxPayload is the longest payload the claim reads, in bytes: a row
	// whose payload is longer is claimed with PayloadLeftOut set, its
	// length computed by the database and its payload never read. 0 means
	// no limit.
	MaxPayload int64
}

// unbounded stands for "no limit" in the claims' byte parameters.
const unbounded = int64(1) << 62

// sizeParams are MaxBytes and MaxPayload as the claims' SQL takes them.
func (p ClaimParams) sizeParams() (maxBytes, maxPayload int64) {
	maxBytes, maxPayload = p.MaxBytes, p.MaxPayload
	if maxBytes <= 0 {
		maxBytes = unbounded
	}
	if maxPayload <= 0 {
		maxPayload = unbounded
	}
	return maxBytes, maxPayload
}

// cutByBytes reports whether a claim of out may have stopped before rows
// that would not fit p.MaxBytes, rather than for lack of claimable rows:
// fewer rows than the limit, and one more as large as the largest would
// not have fit. A claim cut short leaves the key cursor where it is (see
// jumpKeyCursor): the keys whose heads it left out get their turn next.
func (p ClaimParams) cutByBytes(out []Row) bool {
	if p.MaxBytes <= 0 || len(out) >= p.Limit {
		return false
	}
	var total, largest int64
	for i := range out {
		total += out[i].Size()
		largest = max(largest, out[i].Size())
	}
	return total+largest > p.MaxBytes
}

// Claim leases up to limit claimable rows to owner: ClaimBatch without a
// byte bound.
func (s *Store) Claim(ctx context.Context, owner string, limit int) ([]Row, error) {
	return s.ClaimBatch(ctx, ClaimParams{Owner: owner, Limit: limit})
}

// ClaimBatch leases up to p.Limit claimable rows to p.Owner, within
// p.MaxBytes, and returns them in id order. A row is claimable when it is
// pending or failed, its available_at has passed on the database clock,
// and no earlier row of its ordering key is pending, in_flight or failed.
// Claimed rows become in_flight with claimed_at = now() and attempts + 1.
// When more ordering keys have a claimable row than the claim takes, the
// store's claims take the keys in turn (a cursor over keys), not always
// the first ones. One short transaction: one statement on PostgreSQL and
// SQLite, a few on MySQL (see mysqlExecutor.Claim).
func (s *Store) ClaimBatch(ctx context.Context, p ClaimParams) ([]Row, error) {
	res, err := s.exec.Claim(ctx, &claimRowsParams{ClaimParams: p, Cursor: s.heads.get()})
	if err != nil {
		return nil, fmt.Errorf("claim outbox rows: %w", err)
	}
	s.heads.set(res.NextCursor)
	return res.Rows, nil
}

// MarkDone records PubAcks: each row becomes done with relayed_at = now(),
// stream and stream_seq, or is deleted when del is true
// (relay.delete_on_relay). Only rows still in_flight under owner with the
// same attempt change; it returns how many did. A smaller count means the
// lease of the others was taken over (fencing), not an error.
func (s *Store) MarkDone(ctx context.Context, owner string, done []Done, del bool) (int64, error) {
	if len(done) == 0 {
		return 0, nil
	}
	n, err := s.exec.MarkDone(ctx, &markDoneParams{Owner: owner, Done: done, Delete: del})
	if err != nil {
		return 0, fmt.Errorf("mark %d outbox rows done: %w", len(done), err)
	}
	return n, nil
}

// MarkFailed records failed attempts: each row becomes failed (claimable
// again at now() + Backoff) or permanent_failed, with last_error. Fenced
// like MarkDone; it returns how many rows changed.
func (s *Store) MarkFailed(ctx context.Context, owner string, failures []Failure) (int64, error) {
	if len(failures) == 0 {
		return 0, nil
	}
	n, err := s.exec.MarkFailed(ctx, &markFailedParams{Owner: owner, Failures: failures})
	if err != nil {
		return 0, fmt.Errorf("mark %d outbox rows failed: %w", len(failures), err)
	}
	return n, nil
}

// RequeueInflightOlderThan is in-flight recovery: rows in_flight whose lease
// started more than timeout ago (database clock) become failed, claimable
// at once, with last_error "requeued after inflight timeout" and owner
// cleared; attempts are kept. It returns how many rows moved.
//
// A requeue proves only that no result was recorded in time, not that the
// publish failed: the next publish carries the same Nats-Msg-Id.
func (s *Store) RequeueInflightOlderThan(ctx context.Context, timeout time.Duration) (int, error) {
	n, err := s.exec.Requeue(ctx, &requeueParams{OlderThan: timeout})
	if err != nil {
		return 0, fmt.Errorf("requeue in-flight outbox rows: %w", err)
	}
	return n, nil
}

// Stats is a snapshot of the table.
type Stats struct {
	// Rows per status; every status is present.
	Rows map[Status]int64
	// OldestPending is the age of the oldest pending row on the database
	// clock; zero when none is pending.
	OldestPending time.Duration
	// OldestUnsettled is the age of the oldest row not yet relayed nor a
	// dead letter (pending, in flight or failed), on the database clock;
	// zero when there is none. It is the relay's lag: a row that keeps
	// failing ages here while the pending rows are relayed, and so does a
	// row that keeps being claimed and requeued (its lease lost, again and
	// again), which is in flight most of the time.
	OldestUnsettled time.Duration
	// OldestFailed is the failed row with the smallest id, with its age and
	// last error; nil when none is failed, and not read when Stats is asked
	// for no recent errors.
	OldestFailed *RowError
	// RecentErrors are the newest failed and permanent_failed rows.
	RecentErrors []RowError
}

// RowError is a row whose last attempt failed.
type RowError struct {
	ID        int64
	Status    Status
	Attempts  int
	LastError string
	// Subject and Age (on the database clock) are set for
	// Stats.OldestFailed only.
	Subject string
	Age     time.Duration
}

// Stats counts rows per status and, when recent > 0, reads the oldest
// failed row and lists up to recent rows in error.
func (s *Store) Stats(ctx context.Context, recent int) (Stats, error) {
	st := Stats{Rows: make(map[Status]int64, len(Statuses))}
	for _, status := range Statuses {
		st.Rows[status] = 0
	}
	counts, err := s.exec.CountByStatus(ctx)
	if err != nil {
		return st, fmt.Errorf("count outbox rows: %w", err)
	}
	for _, c := range counts.Rows {
		st.Rows[c.Status] = c.Count
		if c.Oldest.IsZero() {
			continue
		}
		switch age := max(counts.Now.Sub(c.Oldest), 0); c.Status {
		case StatusPending:
			st.OldestPending = age
			st.OldestUnsettled = max(st.OldestUnsettled, age)
		case StatusFailed, StatusInFlight:
			st.OldestUnsettled = max(st.OldestUnsettled, age)
		}
	}
	if recent <= 0 {
		return st, nil
	}
	if st.Rows[StatusFailed] > 0 {
		e, ok, err := s.exec.OldestFailed(ctx)
		if err != nil {
			return st, fmt.Errorf("read the oldest failed outbox row: %w", err)
		}
		if ok { // else relayed meanwhile
			st.OldestFailed = &e
		}
	}
	st.RecentErrors, err = s.exec.RecentErrors(ctx, &recentErrorsParams{Limit: recent})
	if err != nil {
		return st, fmt.Errorf("list failed outbox rows: %w", err)
	}
	return st, nil
}

// Entry is a row to insert.
type Entry struct {
	IdempotencyKey string
	Subject        string
	Payload        []byte
	// Headers is a JSON object of string or string-array values; empty means {}.
	Headers     []byte
	OrderingKey string // empty means none
	// MaxPayload is the max_payload of the NATS server the row goes to,
	// when known: an entry whose message cannot fit it is refused, since
	// the relay would make it a dead letter. 0 means unknown.
	MaxPayload int64
}

// ErrAlreadyEnqueued is returned by Enqueue when a row with the same
// idempotency key exists.
var ErrAlreadyEnqueued = errors.New("already enqueued")

// KeyMaxBytes is the longest idempotency or ordering key a row may have
// (MySQL/MariaDB tables hold 255). The idempotency key sits in a unique
// index, whose entries PostgreSQL limits to about 2,700 bytes, and travels
// in the Outbox-Idempotency-Key header (see CheckIdempotencyKey).
const KeyMaxBytes = 1024

// CheckKey returns an error naming what (e.g. "idempotency key") when k
// is not valid UTF-8, contains a NUL byte or is longer than KeyMaxBytes.
func CheckKey(what, k string) error {
	switch {
	case !utf8.ValidString(k):
		return fmt.Errorf("%s %q is not valid UTF-8", what, k)
	case strings.IndexByte(k, 0) >= 0:
		return fmt.Errorf("%s %q contains a NUL byte", what, k)
	case len(k) > KeyMaxBytes:
		return fmt.Errorf("%s %.40q… is %d bytes; keys are at most %d bytes", what, k, len(k), KeyMaxBytes)
	}
	return nil
}

// CheckIdempotencyKey is CheckKey for an idempotency key, which also
// travels in the Outbox-Idempotency-Key header: it refuses ASCII control
// characters too. nats.go writes a header value with CR and LF replaced by
// spaces and leading and trailing spaces and tabs trimmed (writeHeaderValue
// in nats.go), so the header would not hold such a key. The relay does not
// refuse a row whose key has them (written by other means): the row is
// relayed, its Nats-Msg-Id derived from the exact key (MsgID hashes
// it), and only its header is altered.
func CheckIdempotencyKey(what, k string) error {
	if err := CheckKey(what, k); err != nil {
		return err
	}
	if i := strings.IndexFunc(k, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return fmt.Errorf("%s %q contains the control character %q; a key travels in the Outbox-Idempotency-Key header, which cannot hold CR, LF, tab or other ASCII control characters", what, k, k[i])
	}
	return nil
}

// ErrInvalidEntry is wrapped by Enqueue's refusals of an entry that could
// never be published or that the table cannot hold (a bad subject or
// headers; a key longer than a MySQL/MariaDB table's 255 bytes).
var ErrInvalidEntry = errors.New("invalid outbox entry")

// Enqueue inserts one row in its own transaction and returns its id. The
// subject and headers are validated first, so a row that could never be
// published is refused here. Errors: ErrAlreadyEnqueued when the key
// exists; an error wrapping ErrInvalidEntry that names the bad input.
func (s *Store) Enqueue(ctx context.Context, e Entry) (int64, error) {
	if err := CheckSubject(e.Subject); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	if err := CheckIdempotencyKey("idempotency key", e.IdempotencyKey); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	if err := CheckKey("ordering key", e.OrderingKey); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	headers := e.Headers
	if len(headers) == 0 {
		headers = []byte("{}")
	}
	parsed, err := ParseHeaders(headers)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	if least := int64(len(e.Payload)) + MinMessageHeaderBytes(e.IdempotencyKey, parsed); e.MaxPayload > 0 && least > e.MaxPayload {
		return 0, fmt.Errorf("%w: payload of %d bytes: with the headers of its message (at least %d bytes) it is over the NATS server's max_payload of %d bytes",
			ErrInvalidEntry, len(e.Payload), least-int64(len(e.Payload)), e.MaxPayload)
	}
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	var ordering sql.NullString
	if e.OrderingKey != "" {
		ordering = sql.NullString{String: e.OrderingKey, Valid: true}
	}
	id, inserted, err := s.exec.Insert(ctx, &insertParams{IdempotencyKey: e.IdempotencyKey, Subject: e.Subject,
		Payload: e.Payload, Headers: string(headers), OrderingKey: ordering})
	if err != nil {
		return 0, fmt.Errorf("insert outbox row: %w", err)
	}
	if !inserted {
		return 0, fmt.Errorf("idempotency key %q: %w", e.IdempotencyKey, ErrAlreadyEnqueued)
	}
	return id, nil
}

// RetryDead puts the permanent_failed rows among ids back to pending, with
// attempts reset to 0 and last_error kept. Ids of rows in another state
// are ignored. It returns how many rows moved.
func (s *Store) RetryDead(ctx context.Context, ids []int64) (int, error) {
	return s.retry(ctx, "retry dead letters", &retryParams{From: StatusPermanentFailed, IDs: ids})
}

// RetryAllDead puts every permanent_failed row back to pending, like
// RetryDead. It returns how many rows moved.
func (s *Store) RetryAllDead(ctx context.Context) (int, error) {
	return s.retry(ctx, "retry dead letters", &retryParams{From: StatusPermanentFailed, All: true})
}

// RetryFailed makes the failed rows among ids claimable now, with their
// attempts kept: a row waiting out its backoff after the cause was fixed
// need not wait. Ids of rows in another state are ignored. It returns how
// many rows changed.
func (s *Store) RetryFailed(ctx context.Context, ids []int64) (int, error) {
	return s.retry(ctx, "retry failed rows", &retryParams{From: StatusFailed, IDs: ids})
}

// RetryAllFailed makes every failed row claimable now, like RetryFailed.
func (s *Store) RetryAllFailed(ctx context.Context) (int, error) {
	return s.retry(ctx, "retry failed rows", &retryParams{From: StatusFailed, All: true})
}

func (s *Store) retry(ctx context.Context, what string, p *retryParams) (int, error) {
	n, err := s.exec.Retry(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// Retryable returns the ids of the failed rows and of the dead letters
// (permanent_failed) whose subject match accepts, in id order.
func (s *Store) Retryable(ctx context.Context, match func(subject string) bool) (failed, dead []int64, err error) {
	rows, err := s.exec.Retryable(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list failed outbox rows: %w", err)
	}
	for _, r := range rows {
		if !match(r.Subject) {
			continue
		}
		if r.Status == StatusPermanentFailed {
			dead = append(dead, r.ID)
		} else {
			failed = append(failed, r.ID)
		}
	}
	return failed, dead, nil
}

// Stalled reports whether a row has been claimable for longer than age:
// pending or failed, available_at more than age ago (database clock), and
// no earlier row of its ordering key pending, in flight or failed. A row
// waiting out a backoff, or queued behind its key's head, is not
// claimable.
func (s *Store) Stalled(ctx context.Context, age time.Duration) (bool, error) {
	stalled, err := s.exec.Stalled(ctx, &stalledParams{Age: age})
	if err != nil {
		return false, fmt.Errorf("look for claimable outbox rows: %w", err)
	}
	return stalled, nil
}

// MayClaim reports whether a claim may take a row now. False means a claim
// would take none; true may still find none: on PostgreSQL and SQLite it
// is exact (Stalled, at the clock's precision), while MySQL/MariaDB answer for any pending
// row or failed one past its backoff, ordering keys aside (a head in
// flight holds the rows of its key; see queries/mysql/may_claim.sql).
func (s *Store) MayClaim(ctx context.Context) (bool, error) {
	ok, err := s.exec.MayClaim(ctx)
	if err != nil {
		return false, fmt.Errorf("look for claimable outbox rows: %w", err)
	}
	return ok, nil
}

// PurgeBatchDefault is the number of rows one purge statement deletes.
const PurgeBatchDefault = 1000

// PurgeDoneOlderThan deletes done rows relayed more than age ago (database
// clock), batch rows per statement until none is left, so no statement
// holds many locks. It returns how many rows were deleted.
func (s *Store) PurgeDoneOlderThan(ctx context.Context, age time.Duration, batch int) (int, error) {
	if batch <= 0 {
		batch = PurgeBatchDefault
	}
	total := 0
	for {
		n, err := s.exec.Purge(ctx, &purgeParams{OlderThan: age, Limit: batch})
		if err != nil {
			return total, fmt.Errorf("purge done rows: %w", err)
		}
		total += n
		if n < batch {
			return total, nil
		}
	}
}

// StatusOf returns the status of row id, and false when there is no such
// row. One query per row: for operators' commands, not for the relay.
func (s *Store) StatusOf(ctx context.Context, id int64) (Status, bool, error) {
	st, ok, err := s.exec.RowStatus(ctx, &rowStatusParams{ID: id})
	if err != nil {
		return "", false, fmt.Errorf("read status of row %d: %w", id, err)
	}
	return st, ok, nil
}

// RelayedStream returns the stream recorded on a relayed (done) row of
// subject, "" when there is none: where the relay found rows of the subject
// stored before, for a subject whose stream the JetStream API cannot
// resolve (an account subject mapping). One query, for the rare rows in
// doubt whose stream is not known otherwise.
func (s *Store) RelayedStream(ctx context.Context, subject string) (string, error) {
	stream, err := s.exec.RelayedStream(ctx, &relayedStreamParams{Subject: subject})
	if err != nil {
		return "", fmt.Errorf("read the stream of a relayed row of %.80s: %w", subject, err)
	}
	return stream, nil
}
