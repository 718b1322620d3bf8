package mysqlbinlog

import (
	"cmp"
	"context"
	"crypto/sha1"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// Counters are running totals of a Subscriber, safe to read at any time.
type Counters struct {
	Read         atomic.Int64 // rows read from the binary log (again after a restart)
	Relayed      atomic.Int64 // rows marked done (or deleted) after their PubAck
	Deduplicated atomic.Int64 // of those, PubAcks with Duplicate set
	Failed       atomic.Int64 // failed attempts: the row set aside, or tried again
	Dead         atomic.Int64 // rows made dead letters (permanent_failed)
	Swept        atomic.Int64 // rows published by the sweep
	Skipped      atomic.Int64 // rows read from the log that the table marks settled (or no longer has): not published again
	SetAside     atomic.Int64 // rows set aside: failed for reasons of their own, or waiting for such a row of their ordering key
	Restarts     atomic.Int64 // replication sessions started again after an interruption
}

// Subscriber is a Watermill message.Subscriber over the inserts of the
// bridge table, read from the binary log of MySQL or MariaDB. One
// Subscribe call per Subscriber; the topic is informational.
//
// It reads committed transactions in commit order and publishes their
// rows in batches, in that order (sink.Turn), many awaiting their PubAck
// at once. A batch's marks and the position past it are written in one
// transaction once every row of the batch has its outcome, so the stored
// position never passes a row that was not marked.
//
// Failures: a failure of the row's own (its stream refuses it, no stream
// captures its subject) sets it aside: marked failed with a backoff, the
// later rows of its ordering key wait behind it (failed, due), and the
// sweep publishes them in id order; a failure of the destination (NATS
// unreachable or not answering, a stream without a leader) holds the
// batch and tries its rows again, in order, after a backoff (or once NATS
// is connected again). A row that can never be published, or that failed
// MaxAttempts times, becomes a dead letter.
type Subscriber struct {
	db     *outbox.DB
	store  *outbox.Store
	q      outbox.BinlogStatements
	cfg    Config
	srv    Server
	logger *slog.Logger
	quiet  *slog.Logger // the replication library's: its errors come back as errors
	// schema and name are the table's, as the binary log names it.
	schema, name string
	lockName     string
	// The reader's (reader.go): the columns of the last table map read,
	// and whether rows it could not read were logged.
	lastMap  *replication.TableMapEvent
	mapCols  columns
	mapErr   error
	toldCols bool

	// Counters are the subscriber's running totals.
	Counters Counters

	state  atomic.Pointer[readState]
	stored atomic.Pointer[Position] // the last position stored
	oldest atomic.Int64             // unix ns: commit time of the oldest row read and not settled; 0 none
	// recovered is what readiness says (degraded) for recoveredFor after
	// the rows of a purged position were swept.
	recovered atomic.Pointer[recovery]
	// swept is what the last sweep found, for readiness.
	swept source.SweepHealth
	// unmarkable are the rows whose marks a constraint refused (markEach).
	unmarkable unmarkable
	// missed says what the last sweep found that the log never brought
	// (pipeline.missedByLog); nil: nothing.
	missed atomic.Pointer[string]
	// wantPosition is set while a sweep waits for the stored position to
	// reach the server's: the reader then hands over the position past
	// the relay's own writes too (read).
	wantPosition atomic.Bool
	progress     atomic.Int64 // unix ns: rows last settled (the stall watch)
	// marks is the record of the marker's writes; unmarked counts the rows
	// handed to it and not written yet (for readiness and metrics).
	marks    source.LoopHealth
	unmarked atomic.Int64

	closing    chan struct{}
	closeOnce  sync.Once
	done       chan struct{}
	subscribed atomic.Bool
	hardCtx    context.Context
	hardCancel context.CancelFunc
}

// recoveredFor is how long readiness reports a recovery from a purged
// position.
const recoveredFor = 10 * time.Minute

// recovery is a recovery from a purged position, for readiness.
type recovery struct {
	text  string
	until time.Time
}

// readState is what Ready reports.
type readState struct {
	streaming bool
	standby   string // the holder of the lock, while this relay waits
	err       error  // why it does not stream
	fault     string // a fault that lasts while it streams (a purged position being recovered)
}

// NewSubscriber checks the server's binary log settings and the user's
// grants (ErrSettings), resolves the table and its columns and returns a
// Subscriber. The config is copied; zero fields take their defaults.
func NewSubscriber(ctx context.Context, db *outbox.DB, store *outbox.Store, logger *slog.Logger, cfg Config) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	q, ok := store.BinlogStatements()
	if !ok {
		return nil, fmt.Errorf("%w: source: mysql-binlog needs a MySQL or MariaDB outbox table, not %s", ErrSettings, db.Dialect())
	}
	srv, err := CheckServer(ctx, db.SQL)
	if err != nil {
		return nil, err
	}
	schema, name, err := resolveTable(ctx, db.SQL, cfg.Table)
	if err != nil {
		return nil, err
	}
	cfg.ServerID = cmp.Or(cfg.ServerID, DeriveServerID(schema+"."+name))
	if _, err := readColumns(ctx, db.SQL, schema, name); err != nil {
		return nil, err
	}
	if err := createPositionTable(ctx, db.SQL, q, schema, name); err != nil {
		return nil, fmt.Errorf("create the position table %s_binlog: %w", cfg.Table, err)
	}
	hardCtx, hardCancel := context.WithCancel(context.Background())
	s := &Subscriber{
		db: db, store: store, q: q, cfg: cfg, srv: srv, schema: schema, name: name,
		lockName:   lockName(schema, name),
		logger:     logger.With(slog.String("component", "mysql-binlog"), slog.String("table", cfg.Table)),
		quiet:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		closing:    make(chan struct{}),
		done:       make(chan struct{}),
		hardCtx:    hardCtx,
		hardCancel: hardCancel,
	}
	s.state.Store(&readState{err: errors.New("starting")})
	s.progress.Store(time.Now().UnixNano())
	return s, nil
}

// resolveTable returns the schema and name of table as the server has
// them (the connection's database when table is not qualified). Errors:
// outbox.ErrNoTable (wrapped); the database's.
func resolveTable(ctx context.Context, db *sql.DB, table string) (schema, name string, err error) {
	var want any
	name = table
	if sch, n, ok := strings.Cut(table, "."); ok {
		want, name = sch, n
	}
	err = db.QueryRowContext(ctx, `SELECT table_schema, table_name FROM information_schema.tables
		WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?`, want, name).Scan(&schema, &name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", fmt.Errorf("%w: table %s: create it with `bridge migrate`", outbox.ErrNoTable, table)
	}
	if err != nil {
		return "", "", fmt.Errorf("look up outbox table %s: %w", table, err)
	}
	return schema, name, nil
}

// createPositionTable creates the position table (<table>_binlog) where
// the schema lacks it. It looks first: MySQL and MariaDB refuse CREATE
// TABLE IF NOT EXISTS to a user without the CREATE privilege (error 1142)
// even when the table is there, and a relay may run with DML grants once
// bridge migrate, or a DBA with bridge migrate --print, has made it.
func createPositionTable(ctx context.Context, db *sql.DB, q outbox.BinlogStatements, schema, name string) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?`,
		schema, name+"_binlog").Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	_, err := db.ExecContext(ctx, q.PositionCreate)
	return err
}

// lockName is the name of the lock a reader of the table holds
// (GET_LOCK): at most 64 characters, MySQL's limit.
func lockName(schema, name string) string {
	n := "outbox-bridge/binlog/" + schema + "." + name
	if len(n) <= 64 {
		return n
	}
	sum := sha1.Sum([]byte(schema + "." + name))
	return "outbox-bridge/binlog/" + hex.EncodeToString(sum[:])
}

// Subscribe starts reading the binary log and returns the channel of
// emitted messages, closed once ctx ends or Close is called and the
// batch in progress is settled and marked. Errors: source.ErrClosed; an
// error when called twice.
func (s *Subscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	if source.Closed(s.closing) {
		return nil, source.ErrClosed
	}
	if !s.subscribed.CompareAndSwap(false, true) {
		return nil, errors.New("mysql-binlog subscriber: Subscribe called twice; one Subscriber serves one handler")
	}
	out := make(chan *message.Message)
	go func() {
		select {
		case <-ctx.Done():
			s.beginClose()
		case <-s.done:
		}
	}()
	go func() {
		defer close(s.done)
		defer close(out)
		defer s.hardCancel()
		s.loop(out)
	}()
	return out, nil
}

// Close stops reading, waits up to DrainTimeout for the emitted messages'
// outcomes, writes their marks and closes the message channel. Idempotent.
func (s *Subscriber) Close() error {
	s.beginClose()
	if s.subscribed.Load() {
		<-s.done
	} else {
		s.hardCancel()
	}
	return nil
}

func (s *Subscriber) beginClose() { s.closeOnce.Do(func() { close(s.closing) }) }

// Ready is the readiness check: nil while the relay reads the binary log
// and its marks are written (an error when a write of marks has waited for
// the database longer than 5 s, or three failed in a row);
// a health.Degraded error naming the lock's holder while it waits as a
// standby, or the error of the last sweep while it failed; an error when
// the last sweep found no outbox table; otherwise why it does not read (or
// the fault it recovers from).
func (s *Subscriber) Ready(context.Context) error {
	st := s.state.Load()
	switch {
	case st.fault != "":
		return errors.New(st.fault)
	case st.streaming:
		if err := s.marksHealth(); err != nil {
			return err
		}
		if err := s.swept.Err(); err != nil {
			return err
		}
		if err := s.unmarkable.err(2*s.cfg.SweepInterval + time.Minute); err != nil {
			return health.Degraded(err)
		}
		if m := s.missed.Load(); m != nil {
			return health.Degraded(errors.New(*m))
		}
		if r := s.recovered.Load(); r != nil && time.Now().Before(r.until) {
			return health.Degraded(errors.New(r.text))
		}
		return nil
	case st.standby != "":
		return health.Degraded(fmt.Errorf("standby: the binary log of %s is read by %s; this relay waits for its lock %q", s.cfg.Table, st.standby, s.lockName))
	}
	return fmt.Errorf("binary log of %s: not reading: %w", s.cfg.Table, st.err)
}

// LagSeconds is the age of the oldest row read from the log and not yet
// settled (its commit time; 0 when none).
func (s *Subscriber) LagSeconds() float64 {
	o := s.oldest.Load()
	if o == 0 {
		return 0
	}
	return time.Since(time.Unix(0, o)).Seconds()
}

// backoff is the wait before attempt+1 (source.Backoff).
func (s *Subscriber) backoff(attempt int) time.Duration {
	return source.Backoff(attempt, s.cfg.BackoffInitial, s.cfg.BackoffMax)
}

// sleep waits d or until closing; false when closing.
func (s *Subscriber) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.closing:
		return false
	}
}

// loop takes the lock and reads sessions until closing: a session that
// ends on an error is started again, from the stored position, after a
// backoff.
func (s *Subscriber) loop(out chan<- *message.Message) {
	failures := 0
	for !source.Closed(s.closing) {
		conn, holder, err := s.acquire()
		switch {
		case err != nil:
			s.state.Store(&readState{err: err})
			s.logger.Warn("cannot take the binary log's lock; trying again in 5s", slog.Any("error", err))
			s.sleep(5 * time.Second)
			continue
		case conn == nil:
			if st := s.state.Load(); st.standby != holder {
				s.logger.Info("standby: another relay reads the binary log of the table; waiting for its lock", slog.String("holder", holder), slog.String("lock", s.lockName))
			}
			s.state.Store(&readState{standby: holder})
			s.sleep(5 * time.Second)
			continue
		}
		err = s.session(conn, out)
		s.release(conn)
		if source.Closed(s.closing) {
			return
		}
		failures++
		s.Counters.Restarts.Add(1)
		wait := min(time.Duration(failures)*time.Second, 30*time.Second)
		if sameServerID(err) { // readiness names the fix, as the log does
			err = fmt.Errorf("another replica or reader of the binary log registered with this relay's server_id %d; set binlog.server_id to a value of its own: %w", s.cfg.ServerID, err)
		}
		st := &readState{err: err}
		if prev := s.state.Load(); prev.fault != "" {
			st.fault = prev.fault
		}
		s.state.Store(st)
		switch {
		case purged(err):
			// readFailed said it, and moved the position.
			wait = time.Second
		case sameServerID(err):
			s.logger.Error("cannot read the binary log", slog.Uint64("server_id", uint64(s.cfg.ServerID)), slog.Any("error", err))
			wait = 5 * time.Second
		case isSettings(err):
			s.logger.Error("cannot read the binary log; fix the server and the relay goes on by itself", slog.Any("error", err))
			wait = 5 * time.Second
		default:
			s.logger.Warn("binary log session ended; starting again from the stored position", slog.Any("error", err), slog.Duration("wait", wait))
		}
		if !s.sleep(wait) {
			return
		}
		if err == nil {
			failures = 0
		}
	}
}

// sameServerID reports the server's refusal of a second connection with
// the server_id of one connected (MariaDB 4052 ER_SLAVE_SAME_ID, MySQL
// 13114 with "same server_uuid/server_id").
func sameServerID(err error) bool {
	var me *gomysql.MyError
	return errors.As(err, &me) && (me.Code == 4052 || strings.Contains(me.Message, "same server_uuid/server_id") || strings.Contains(me.Message, "same server_id"))
}

func isSettings(err error) bool {
	if errors.Is(err, ErrSettings) {
		return true
	}
	var me *gomysql.MyError
	// ER_SPECIFIC_ACCESS_DENIED_ERROR (1227: no REPLICATION SLAVE),
	// ER_ACCESS_DENIED_ERROR (1045).
	return errors.As(err, &me) && (me.Code == 1227 || me.Code == 1045)
}

// release lets go of the lock and gives its session back to the pool as
// it was taken (a session of database/sql's pool outlives its Conn).
func (s *Subscriber) release(conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", s.lockName)
	_, _ = conn.ExecContext(ctx, "SET SESSION wait_timeout = @@GLOBAL.wait_timeout")
	conn.Close()
}

// lockHolder names the session holding the lock name: its connection id
// and, when the processlist shows it, user@host; "" when none holds it.
func lockHolder(ctx context.Context, db *sql.DB, name string) string {
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&id); err != nil || !id.Valid {
		return ""
	}
	var user, host string
	if err := db.QueryRowContext(ctx, "SELECT user, host FROM information_schema.processlist WHERE id = ?", id.Int64).Scan(&user, &host); err == nil {
		return fmt.Sprintf("connection %d (%s@%s)", id.Int64, user, host)
	}
	return fmt.Sprintf("connection %d", id.Int64)
}

// lockIdle is the wait_timeout of the lock's session: how long a holder
// that stopped answering keeps a standby waiting.
const lockIdle = 30 * time.Second

// acquire takes the table's lock on a session of its own, held while this
// relay reads; nil and the holder (its connection id, user and host) when
// another session holds it.
func (s *Subscriber) acquire() (*sql.Conn, string, error) {
	ctx, cancel := context.WithTimeout(s.hardCtx, 10*time.Second)
	defer cancel()
	conn, err := s.db.SQL.Conn(ctx)
	if err != nil {
		return nil, "", err
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", s.lockName).Scan(&got); err != nil {
		conn.Close()
		return nil, "", err
	}
	if got.Int64 == 1 {
		// A holder that stops answering (frozen, cut off) loses the lock
		// once its session idles this long; its own checks (keepLock)
		// keep it busy every 2 s.
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION wait_timeout = %d", int(lockIdle.Seconds()))); err != nil {
			conn.Close()
			return nil, "", err
		}
		return conn, "", nil
	}
	conn.Close()
	holder := lockHolder(ctx, s.db.SQL, s.lockName)
	if holder == "" {
		holder = "another session"
	}
	return nil, holder, nil
}
