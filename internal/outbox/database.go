package outbox

import (
	"cmp"
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver (no cgo)

	"github.com/outbox-bridge/bridge/internal/secret"
)

// AcceptedSchemes lists the database URL forms Open accepts.
const AcceptedSchemes = "postgres://…, postgresql://…, mysql://… (a URL, or a go-sql-driver DSN such as mysql://user@tcp(host:3306)/db), sqlite:PATH"

// ErrUnknownScheme is returned (wrapped) by Open for a URL it cannot open:
// an unknown scheme, or a URL or parameter its driver cannot parse.
var ErrUnknownScheme = errors.New("invalid database URL")

// DB is an open outbox database.
type DB struct {
	SQL    *sql.DB
	driver driver
	// Redacted is the URL without its password, for logs and messages.
	Redacted string
	// pgConfig is the configuration of every PostgreSQL session the
	// relay opens, the LISTEN session included; nil on other databases.
	pgConfig *pgx.ConnConfig
	// explicitIsolation is set while the PostgreSQL sessions' default
	// isolation is stricter than READ COMMITTED: the relay's writes then
	// run in READ COMMITTED transactions of their own (see write).
	explicitIsolation atomic.Bool
	// mysqlTxOptions begin the MySQL relay's transactions (claim, in-flight
	// recovery): nil when openMySQL set the sessions to READ COMMITTED,
	// READ COMMITTED when the URL chose another level.
	mysqlTxOptions *sql.TxOptions
	// fence retires the PostgreSQL and MySQL sessions older than the last
	// one that could not serve the relay; nil on SQLite.
	fence *sessionFence
	// pgStatements chooses the PostgreSQL sessions' statement mode; nil
	// when the URL names default_query_exec_mode, and on other databases.
	pgStatements *pgStatements
	// mysqlInterpolated: the MySQL sessions write a statement's arguments
	// into its text (see openMySQL).
	mysqlInterpolated bool
}

// Statements says how the relay's statements reach the server now, for
// the "relay running" log line: on PostgreSQL "prepared" (named prepared
// statements: connected directly), "unnamed" (behind a connection pooler,
// or no session has answered yet) or pgx's name of the mode the URL set
// ("cache describe", …); on MySQL "interpolated" or "prepared"; on SQLite
// "in process".
func (db *DB) Statements() string {
	switch db.Dialect() {
	case DialectPostgres:
		if db.pgStatements == nil {
			return db.pgConfig.DefaultQueryExecMode.String()
		}
		if db.pgStatements.prepared() {
			return "prepared"
		}
		return "unnamed"
	case DialectMySQL:
		if db.mysqlInterpolated {
			return "interpolated"
		}
		return "prepared"
	}
	return "in process"
}

// StatementsAttr is Statements as the log attribute "statements".
func (db *DB) StatementsAttr() slog.Attr { return slog.String("statements", db.Statements()) }

// Dialect names the database kind: one of Dialects.
func (db *DB) Dialect() Dialect { return db.driver.dialect() }

// Capabilities says what the database offers beyond the operations every
// database supports (LISTEN/NOTIFY, concurrent writers).
func (db *DB) Capabilities() Capabilities { return db.driver.capabilities() }

// Close closes the connection pool.
func (db *DB) Close() error { return db.SQL.Close() }

// Session names the database sessions of a pool and bounds their life, on
// PostgreSQL and MySQL (SQLite has no sessions to speak of).
type Session struct {
	// Name identifies the relay in the server's list of sessions:
	// PostgreSQL's application_name (unless the URL or PGAPPNAME sets one;
	// pg_stat_activity shows it) and the program_name connection attribute
	// on MySQL (performance_schema.session_connect_attrs). At most 63 bytes
	// are kept. Defaults to "bridge" (SessionNameDefault).
	Name string
	// MaxLifetime is the age after which a session is closed instead of
	// being reused, so that none stays on a server that was demoted or
	// moved away from. Defaults to 3m (ConnMaxLifetimeDefault).
	MaxLifetime time.Duration
	// MaxIdleTime is how long an unused session is kept. Defaults to 1m
	// (ConnMaxIdleTimeDefault).
	MaxIdleTime time.Duration
	// ConnectTimeout bounds the opening of a session (connection, TLS,
	// authentication; pgx's connect_timeout and the MySQL driver's dial
	// timeout unless the URL sets them) and OpenSession's first check of the
	// database. Defaults to 10s (ConnectTimeoutDefault).
	ConnectTimeout time.Duration
	// Logger receives the lines the pool writes while it runs (a PostgreSQL
	// pool that finds itself behind a connection pooler); nil: none.
	Logger *slog.Logger
}

// Defaults of Session (database.conn_max_lifetime,
// database.conn_max_idle_time, database.connect_timeout).
const (
	ConnMaxLifetimeDefault = 3 * time.Minute
	ConnMaxIdleTimeDefault = time.Minute
	ConnectTimeoutDefault  = 10 * time.Second
)

// SessionsMax bounds the PostgreSQL and MySQL sessions of one pool, so
// that a relay's need of server sessions is known (behind a pooler in
// session mode, each holds one of the pooler's server sessions): the claim
// loop and the settlement writes take one each at a time, and the rest
// share what is left — readiness checks, the table's metrics, the stall
// watch, retention, a command's statements. Each of them has a deadline,
// so none holds a session for long. The LISTEN session (direct
// connections only) and a postgres-wal relay's replication connection
// come on top. As many are kept idle: with database/sql's default of 2,
// sessions given back while 4 were busy were closed and opened again at
// once, a new PostgreSQL backend each time, and for a moment one session
// more than the bound (a relay over 200 tables, TestOneRelayOverManyTables).
const SessionsMax = 4

// SessionNameDefault is the name of the sessions of a zero Session.
const SessionNameDefault = "bridge"

// SessionName is the session name of a relay or command run by owner:
// "bridge <owner>".
func SessionName(owner string) string {
	if owner == "" {
		return SessionNameDefault
	}
	return SessionNameDefault + " " + owner
}

func (s Session) withDefaults() Session {
	s.Name = cmp.Or(s.Name, SessionNameDefault)
	if len(s.Name) > 63 { // NAMEDATALEN-1: PostgreSQL cuts longer names
		s.Name = strings.ToValidUTF8(s.Name[:63], "")
	}
	s.MaxLifetime = cmp.Or(s.MaxLifetime, ConnMaxLifetimeDefault)
	s.MaxIdleTime = cmp.Or(s.MaxIdleTime, ConnMaxIdleTimeDefault)
	s.ConnectTimeout = cmp.Or(s.ConnectTimeout, ConnectTimeoutDefault)
	return s
}

// Open opens the database at rawURL with the default Session; see
// OpenSession.
func Open(ctx context.Context, rawURL string) (*DB, error) {
	return OpenSession(ctx, rawURL, Session{})
}

// OpenSession opens the database at rawURL: postgres://… or postgresql://…
// (pgx; TLS through sslmode, sslrootcert and the other libpq parameters;
// see openPostgres), mysql://user:pass@host:port/db?param=value or
// mysql://user:pass@tcp(host:port)/db?param=value (MySQL 8.0.16+ or
// MariaDB 10.6+ through go-sql-driver/mysql; see openMySQL) or sqlite:PATH
// (modernc.org/sqlite, no cgo; the file and its directory are created when
// missing). SQLite is opened in WAL mode with a 10 s busy timeout so that
// producer processes can write the same file while the relay runs.
// PostgreSQL and MySQL sessions are named and bounded by s. A session that
// reports that it cannot serve the relay — its server or transaction is
// read-only, or it is being shut down — is closed at once, so that the pool
// opens a new one (after a failover, to the new primary). It pings the
// database before returning.
//
// Errors: ErrUnknownScheme (wrapped, naming the value and AcceptedSchemes)
// for any other URL; otherwise the driver's connection error.
func OpenSession(ctx context.Context, rawURL string, s Session) (*DB, error) {
	s = s.withDefaults()
	// A server that accepts the TCP connection and never answers would
	// otherwise hold the caller (the first build of `bridge run`) forever.
	ctx, cancel := context.WithTimeout(ctx, s.ConnectTimeout)
	defer cancel()
	if d, _, ok := driverOfURL(rawURL); ok {
		return d.open(ctx, rawURL, s)
	}
	return nil, fmt.Errorf("%w: %q; accepted: %s", ErrUnknownScheme, RedactURL(rawURL), AcceptedSchemes)
}

// openPostgres opens a PostgreSQL pool with pgx's database/sql driver. On
// top of the URL's parameters:
//   - unless the URL sets default_query_exec_mode, the mode is chosen per
//     session (pgStatements): named prepared statements (pgx's
//     cache_statement) on a session connected to the server itself; behind
//     a pooler, and on the pool's first session, cache_describe: each
//     statement is parsed, bound and run in one round trip on the unnamed
//     statement, since a pooler in transaction or statement mode —
//     PgBouncer before 1.21, most hosted "pooled" endpoints — moves named
//     statements between server sessions (42P05 "already exists", 26000
//     "does not exist"). pgx.QueryExecModeCacheDescribe's documentation:
//     one round trip, no named prepared statement.
//   - application_name = s.Name unless the URL (or PGAPPNAME) sets one.
//   - a session that reports an error meaning it cannot serve the relay is
//     closed at once (pgconn.Config.OnPgError: returning false closes the
//     connection; database/sql then discards it at its next use, from
//     ResetSession, and retries on another): 25006 read_only_sql_transaction
//     (the database or the session is read-only, or the server is a
//     standby), 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
//     cannot_connect_now. FATAL errors close the session as before. Every
//     session opened before it is discarded before it is reused (see
//     sessionFence): they reach the same server, and a session that began
//     while the database was read-only (default_transaction_read_only, as
//     while a database is fenced during a failover) stays read-only for
//     its whole life.
//   - sessions live at most s.MaxLifetime and idle at most s.MaxIdleTime.
func openPostgres(ctx context.Context, rawURL string, s Session) (*DB, error) {
	const accepted = "accepted: postgres://user:password@host:port/database?sslmode=…, with libpq's parameters"
	// The URL's text is checked before a parser sees it: the parser's
	// message about a URL whose password holds '#', '?' or '/' quotes
	// part of the password. Then parsed so that a bad parameter
	// (sslmode=bogus, a bad port) is told apart from a server that cannot
	// be reached; a parse error is reported from the redacted URL, which
	// fails the same way without a password to quote.
	if _, err := secret.CheckURL(rawURL, RedactURL); err != nil {
		return nil, fmt.Errorf("%w: %q: %v; %s", ErrUnknownScheme, RedactURL(rawURL), err, accepted)
	}
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		if _, rerr := pgx.ParseConfig(RedactURL(rawURL)); rerr != nil {
			err = rerr
		} else {
			err = errors.New("the URL does not parse with its password, and does without it")
		}
		for inner := errors.Unwrap(err); inner != nil; inner = errors.Unwrap(inner) {
			err = inner // the outermost error repeats the URL
		}
		return nil, fmt.Errorf("%w: %q: %v; %s", ErrUnknownScheme, RedactURL(rawURL), err, accepted)
	}
	var statements *pgStatements // nil: the URL chose the mode
	if !pgURLParamSet(rawURL, "default_query_exec_mode") {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		statements = &pgStatements{}
	}
	if _, set := cfg.RuntimeParams["application_name"]; !set {
		cfg.RuntimeParams["application_name"] = s.Name
	}
	if !pgURLParamSet(rawURL, "connect_timeout") {
		cfg.ConnectTimeout = s.ConnectTimeout
	}
	db := &DB{driver: postgresDriver{}, Redacted: RedactURL(rawURL), pgConfig: cfg, fence: &sessionFence{}, pgStatements: statements}
	if statements != nil && s.Logger != nil {
		statements.logger = s.Logger.With(slog.String("database", db.Redacted))
	}
	onError := cfg.OnPgError
	cfg.OnPgError = func(c *pgconn.PgConn, e *pgconn.PgError) bool {
		if pgSessionUnusable(e.Code) {
			db.fence.raise()
			return false
		}
		if statements != nil && statements.refused(e) {
			db.fence.raise() // the sessions that prepared: retired at their next use
			return false
		}
		return onError == nil || onError(c, e)
	}
	options := []stdlib.OptionOpenDB{
		stdlib.OptionAfterConnect(db.afterPostgresConnect),
		stdlib.OptionResetSession(db.resetPostgresSession),
	}
	if statements != nil {
		options = append(options, stdlib.OptionBeforeConnect(statements.beforeConnect))
	}
	db.SQL = stdlib.OpenDB(*cfg, options...)
	db.SQL.SetConnMaxLifetime(s.MaxLifetime)
	db.SQL.SetConnMaxIdleTime(s.MaxIdleTime)
	db.SQL.SetMaxOpenConns(SessionsMax)
	db.SQL.SetMaxIdleConns(SessionsMax) // see SessionsMax
	if err := db.SQL.PingContext(ctx); err != nil {
		db.SQL.Close()
		// Without a database in the URL the server takes the user's name.
		name := pgx.Identifier{cmp.Or(cfg.Database, cfg.User)}.Sanitize()
		return nil, connectFailed("postgres", db.Redacted, distinctLines{err}, pgCode(err) == "3D000", name) // invalid_catalog_name
	}
	if statements.prepared() {
		// The first session was opened before anyone knew: retired at its
		// next use, so that every session of the pool prepares.
		db.fence.raise()
	}
	return db, nil
}

// pgURLParamSet reports whether the query of a PostgreSQL URL (which
// pgx.ParseConfig has accepted) names the parameter name, whatever its
// value: a password or a value that holds the name does not count, an
// escaped name (default%5Fquery%5Fexec%5Fmode) does, as pgx reads it.
func pgURLParamSet(rawURL, name string) bool {
	_, query, _ := strings.Cut(rawURL, "?")
	params, err := url.ParseQuery(query)
	return err == nil && params.Has(name)
}

// distinctLines prints an error with each of its lines once. pgx's
// *pgconn.ConnectError lists one line per connection attempt, and with
// sslmode=prefer (the default) against a server that offers TLS it tries
// TLS and then plain text, which a wrong role or database refuses alike:
// the same line twice ("failed to connect to `user=… database=…`:" then
// "host (host): server error: FATAL: …" per attempt, pgconn/errors.go).
// errors.Is and errors.As see the original error.
type distinctLines struct{ err error }

func (e distinctLines) Error() string {
	lines := strings.Split(e.err.Error(), "\n")
	seen := make(map[string]bool, len(lines))
	kept := lines[:0]
	for _, l := range lines {
		if !seen[l] {
			seen[l] = true
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

func (e distinctLines) Unwrap() error { return e.err }

// pgSessionUnusable reports whether SQLSTATE code means that the session
// cannot serve the relay any more and must be replaced: 25006
// read_only_sql_transaction, 57P01 admin_shutdown, 57P02 crash_shutdown,
// 57P03 cannot_connect_now (PostgreSQL, Appendix A "Error Codes").
func pgSessionUnusable(code string) bool {
	switch code {
	case "25006", "57P01", "57P02", "57P03":
		return true
	}
	return false
}

// connectedAtKey holds a PostgreSQL session's start in its
// pgconn.PgConn.CustomData.
const connectedAtKey = "outbox.connected_at"

// resetPostgresSession runs before a pooled session is reused: a session
// older than the fence is discarded (database/sql then takes another).
func (db *DB) resetPostgresSession(_ context.Context, conn *pgx.Conn) error {
	if at, ok := conn.PgConn().CustomData()[connectedAtKey].(time.Time); ok && db.fence.stale(at) {
		return sqldriver.ErrBadConn
	}
	return nil
}

// sessionFence retires every session opened before the last one that
// answered that it cannot serve the relay (a read-only error, a shutdown),
// before it is reused: after a failover or while the database is fenced,
// they all reach the same server, and a PostgreSQL session that began while
// default_transaction_read_only was on stays read-only even after the
// database is writable again. A session opened later is tried: if it fails
// too, it raises the fence again. The start time is the client's, not the
// server's, so that it holds behind a pooler too.
type sessionFence struct {
	at atomic.Int64 // Unix nanoseconds; 0: never raised
}

func (f *sessionFence) raise() { f.at.Store(time.Now().UnixNano()) }

// stale reports whether a session that started at connectedAt is older than
// the fence.
func (f *sessionFence) stale(connectedAt time.Time) bool {
	return connectedAt.UnixNano() <= f.at.Load()
}

// Abandon makes the PostgreSQL and MySQL sessions opened until now not be
// reused (see sessionFence): for a statement that got no answer within its
// deadline, since the other sessions reach the same server, which may have
// stopped answering or been moved away from (a failover behind a DNS name
// or a proxy). The session of that statement is closed already (pgx and
// go-sql-driver/mysql close a session whose statement was cut short by its
// context). No-op on SQLite.
func (db *DB) Abandon() {
	if db.fence != nil {
		db.fence.raise()
	}
}

// afterPostgresConnect reads the new session's process id (for
// pgStatements) and default isolation level: anything stricter than READ
// COMMITTED (a database or role default of REPEATABLE READ or
// SERIALIZABLE) makes the relay run its writes in READ COMMITTED
// transactions of their own (see write). The setting is
// read per session, not sent at connect: a pooler refuses unknown startup
// parameters, and a SET would leak to the pooler's other clients.
func (db *DB) afterPostgresConnect(ctx context.Context, conn *pgx.Conn) error {
	conn.PgConn().CustomData()[connectedAtKey] = time.Now()
	var level string
	var pid uint32
	// The simple protocol, whatever the session's mode: this statement
	// tells whether the session may prepare (pgStatements.connected).
	if err := conn.QueryRow(ctx, "SELECT current_setting('default_transaction_isolation'), pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&level, &pid); err != nil {
		return fmt.Errorf("read default_transaction_isolation: %w", err)
	}
	db.explicitIsolation.Store(level != "read committed" && level != "read uncommitted")
	if db.pgStatements != nil {
		return db.pgStatements.connected(conn, pid)
	}
	return nil
}

func openSQLite(ctx context.Context, path string) (*DB, error) {
	path = strings.TrimPrefix(path, "//")
	if path == "" {
		return nil, fmt.Errorf("%w: \"sqlite:\" has no path; accepted: %s", ErrUnknownScheme, AcceptedSchemes)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create directory for sqlite database %s: %w", path, err)
		}
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	sqlDB, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// One writer at a time is all SQLite allows; a single connection keeps
	// the relay's own statements from contending for the write lock.
	sqlDB.SetMaxOpenConns(1)
	db := &DB{SQL: sqlDB, driver: sqliteDriver{}, Redacted: "sqlite:" + path}
	if err := db.SQL.PingContext(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return db, nil
}

// openMySQL opens a MySQL or MariaDB database. The URL's query parameters
// are go-sql-driver/mysql DSN parameters (tls=true|skip-verify|preferred,
// timeout, …); any other name is a session variable set on every
// connection, as the driver does. On top of them every connection gets:
//   - time_zone = '+00:00', so that NOW() is UTC like the UTC_TIMESTAMP(6)
//     the relay's SQL uses (unless the URL sets time_zone);
//   - strict SQL mode (STRICT_ALL_TABLES added to the server's sql_mode,
//     unless the URL sets sql_mode): a value too long for its column is an
//     error, not silently cut — a cut owner would break fencing, a cut key
//     would merge two events;
//   - READ COMMITTED (unless the URL sets transaction_isolation or
//     tx_isolation): InnoDB then takes no gap locks, so the relay's range
//     updates (in-flight recovery, retention) never hold producers' inserts
//     back, and an UPDATE skips rows locked by another relay that it would
//     not change instead of waiting for them. The variable is
//     transaction_isolation on MySQL 8 and MariaDB 11.1+, tx_isolation on
//     older MariaDB; openMySQL asks the server which one it knows. When
//     the URL sets another level, the claim and the in-flight recovery
//     begin their transactions at READ COMMITTED themselves;
//   - clientFoundRows off and no multi-statements, whatever the URL says:
//     affected-row counts are rows changed (Enqueue and the fenced marks
//     count on it), and every statement is sent on its own;
//   - interpolateParams on, unless the URL sets interpolateParams, charset,
//     collation or a character_set_* variable, or the server gives the
//     session a client character set other than utf8mb4, utf8mb3, latin1,
//     ascii or binary: the driver writes a statement's arguments into its
//     text, escaped as the session's sql_mode asks (NO_BACKSLASH_ESCAPES
//     included), and sends it in one packet. Without it, every statement
//     with arguments is prepared on the server, executed and closed: the
//     claim's and the mark's, which name up to 500 ids each, cost MariaDB
//     10.11 15–35 % more CPU per relayed row (bridge-bench's database
//     phase, docs/BENCHMARKS.md). Otherwise the driver's default, off:
//     interpolation is unsafe under the multi-byte charsets whose
//     characters may contain a backslash's byte (big5, gbk, sjis, cp932,
//     gb18030). With it, maxAllowedPacket is read from the server (unless
//     the URL sets it), so that a statement whose escaped arguments would
//     exceed it is prepared instead;
//   - the connection attribute program_name = s.Name (unless the URL's
//     connectionAttributes sets it);
//   - a session refused a write with error 1290 (the server runs with
//     read_only) or 1792 (read-only transaction) is closed at once, and the
//     sessions opened before it are not reused (see mysqlSession,
//     sessionFence); sessions live at most s.MaxLifetime and idle at most
//     s.MaxIdleTime.
//
// Times are read as text (parseTime=false unless the URL asks otherwise);
// both forms are understood.
func openMySQL(ctx context.Context, rawURL string, s Session) (*DB, error) {
	cfg, err := mysqlConfig(rawURL)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(cfg.ConnectionAttributes, "program_name:") {
		// The driver splits attributes at "," and ":".
		name := strings.NewReplacer(",", "_", ":", "_").Replace(s.Name)
		cfg.ConnectionAttributes = strings.TrimPrefix(cfg.ConnectionAttributes+",program_name:"+name, ",")
	}
	var txOptions *sql.TxOptions // the sessions run at READ COMMITTED
	// The server reads variable names in any case.
	if mysqlParamSet(cfg.Params, "transaction_isolation", "tx_isolation") {
		txOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	} else {
		name, err := mysqlIsolationVariable(ctx, cfg)
		if err != nil {
			return nil, mysqlConnectFailed(RedactURL(rawURL), cfg.DBName, err)
		}
		cfg.Params[name] = "'READ-COMMITTED'"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = s.ConnectTimeout // the driver's dial timeout
	}
	db, err := mysqlPool(ctx, rawURL, cfg, s, txOptions)
	if err != nil || !cfg.InterpolateParams {
		return db, err
	}
	// The server may set the client character set itself (init_connect,
	// character-set-client-handshake off), which no URL shows: under big5,
	// gbk, sjis, cp932 or gb18030 a backslash the driver writes to escape a
	// quote can be read as part of the byte before it, and the quote would
	// end the string. Then the statements are prepared, as by default.
	var charset string
	if err := db.SQL.QueryRowContext(ctx, "SELECT @@character_set_client").Scan(&charset); err != nil {
		db.Close()
		return nil, mysqlConnectFailed(db.Redacted, cfg.DBName, err)
	}
	if mysqlInterpolationSafe[strings.ToLower(charset)] {
		return db, nil
	}
	db.Close()
	cfg.InterpolateParams = false
	return mysqlPool(ctx, rawURL, cfg, s, txOptions)
}

// mysqlInterpolationSafe are the client character sets under which the
// driver's escaping of interpolated arguments is sound: none of their
// multi-byte characters holds the byte of a backslash or a quote.
var mysqlInterpolationSafe = map[string]bool{"utf8mb4": true, "utf8mb3": true, "utf8": true, "latin1": true, "ascii": true, "binary": true}

// mysqlPool opens the relay's pool of sessions of cfg (see openMySQL) and
// pings it.
func mysqlPool(ctx context.Context, rawURL string, cfg *mysql.Config, s Session, txOptions *sql.TxOptions) (*DB, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open mysql %s: %w", RedactURL(rawURL), err)
	}
	fence := &sessionFence{}
	sqlDB := sql.OpenDB(mysqlConnector{connector, fence})
	// Servers close idle connections after wait_timeout (8 h by default) and
	// proxies often sooner; the driver's README recommends a lifetime
	// shorter than 5 minutes.
	sqlDB.SetConnMaxLifetime(s.MaxLifetime)
	sqlDB.SetConnMaxIdleTime(s.MaxIdleTime)
	sqlDB.SetMaxOpenConns(SessionsMax)
	sqlDB.SetMaxIdleConns(SessionsMax) // see SessionsMax
	db := &DB{SQL: sqlDB, driver: mysqlDriver{}, Redacted: RedactURL(rawURL), fence: fence, mysqlTxOptions: txOptions, mysqlInterpolated: cfg.InterpolateParams}
	if err := db.SQL.PingContext(ctx); err != nil {
		sqlDB.Close()
		return nil, mysqlConnectFailed(db.Redacted, cfg.DBName, err)
	}
	return db, nil
}

// mysqlConnectFailed is connectFailed for MySQL error 1049
// (ER_BAD_DB_ERROR) on the database dbName.
func mysqlConnectFailed(redacted, dbName string, err error) error {
	return connectFailed("mysql", redacted, err, mysqlCode(err) == 1049, "`"+strings.ReplaceAll(dbName, "`", "``")+"`")
}

// connectFailed is the error of a session to the dialect's URL redacted
// that could not be opened. When the server has no database of the URL's
// name (unknown) it wraps ErrUnknownDatabase and names the statement that
// creates it (quoted: the name as the dialect quotes it).
func connectFailed(dialect, redacted string, err error, unknown bool, quoted string) error {
	if unknown {
		return fmt.Errorf("connect to %s %s: %w: create it (CREATE DATABASE %s) or fix the name in the URL: %w", dialect, redacted, ErrUnknownDatabase, quoted, err)
	}
	return fmt.Errorf("connect to %s %s: %w", dialect, redacted, err)
}

// mysqlIsolationVariable returns the name of the session variable that
// sets the isolation level on the server of cfg: transaction_isolation
// (MySQL 5.7.20+, MariaDB 11.1+) or tx_isolation (older MariaDB). It tries
// the first on one connection; error 1193 ER_UNKNOWN_SYSTEM_VARIABLE means
// the second.
func mysqlIsolationVariable(ctx context.Context, cfg *mysql.Config) (string, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return "", err
	}
	probe := sql.OpenDB(connector)
	defer probe.Close()
	_, err = probe.ExecContext(ctx, "SET SESSION transaction_isolation = 'READ-COMMITTED'")
	switch {
	case err == nil:
		return "transaction_isolation", nil
	case mysqlCode(err) == 1193: // ER_UNKNOWN_SYSTEM_VARIABLE
		return "tx_isolation", nil
	}
	return "", err
}

// mysqlAccepted names the MySQL URL forms mysqlConfig accepts.
const mysqlAccepted = "mysql://user:password@host:port/database?param=value, or the go-sql-driver DSN after mysql:// as in mysql://user:password@tcp(host:port)/database?param=value"

// mysqlConfig turns mysql://user:pass@host:port/db?param=value into the
// driver's configuration (user:pass@tcp(host:port)/db?param=value). A
// go-sql-driver DSN after mysql:// — the form of golang-migrate,
// mysql://user:pass@tcp(host:port)/db or @unix(/path) — is taken as it is.
func mysqlConfig(rawURL string) (*mysql.Config, error) {
	var cfg *mysql.Config
	var query string // the URL's parameters, as written
	if dsn := strings.TrimPrefix(rawURL, "mysql://"); isMySQLDSN(dsn) {
		// The driver reads its parameters after the last "/" (the
		// database's).
		if _, params, ok := strings.Cut(dsn[strings.LastIndexByte(dsn, '/')+1:], "?"); ok {
			query = params
		}
		// The driver's messages name its parameters, not the user or
		// password; the password of a DSN is taken as it is written, so the
		// driver must have read it where its text is (secret.Userinfo).
		var err error
		if cfg, err = mysql.ParseDSN(dsn); err != nil {
			return nil, fmt.Errorf("%w: %q: %w; accepted: %s", ErrUnknownScheme, RedactURL(rawURL), err, mysqlAccepted)
		}
		if user, password, _, _ := secret.Userinfo(rawURL); user != cfg.User || password != cfg.Passwd {
			return nil, fmt.Errorf("%w: %q: the driver reads its user and password elsewhere than its text has them (an @ after the address?); accepted: %s", ErrUnknownScheme, RedactURL(rawURL), mysqlAccepted)
		}
		for name := range cfg.Params {
			if strings.Contains(strings.ToLower(name), "password") {
				return nil, fmt.Errorf("%w: %q: parameter %s: %s", ErrUnknownScheme, RedactURL(rawURL), name, secret.MySQLPasswordParamWhy)
			}
		}
	} else {
		// The URL's text is checked before a parser sees it (see
		// openPostgres).
		u, err := secret.CheckURL(rawURL, RedactURL)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v; accepted: %s", ErrUnknownScheme, RedactURL(rawURL), err, mysqlAccepted)
		}
		if name := secret.MySQLPasswordParam(u); name != "" {
			return nil, fmt.Errorf("%w: %q: parameter %s: %s", ErrUnknownScheme, RedactURL(rawURL), name, secret.MySQLPasswordParamWhy)
		}
		if u.Host == "" || u.Opaque != "" {
			return nil, fmt.Errorf("%w: %q has no host; accepted: %s", ErrUnknownScheme, RedactURL(rawURL), mysqlAccepted)
		}
		query = u.RawQuery
		base := mysql.NewConfig()
		base.Net = "tcp"
		base.Addr = u.Host
		if u.Port() == "" {
			base.Addr = net.JoinHostPort(u.Hostname(), "3306")
		}
		base.DBName = strings.TrimPrefix(u.Path, "/")
		// The driver parses its own parameters (and validates tls=…) from a
		// DSN; FormatDSN writes address and database in its syntax, and the
		// URL's query is already in DSN form. The user and password are set
		// after parsing: in the DSN's text a ? or / of the password would be
		// read as the start of the parameters or the database.
		dsn := base.FormatDSN()
		if u.RawQuery != "" {
			sep := "?"
			if strings.Contains(dsn, "?") {
				sep = "&"
			}
			dsn += sep + u.RawQuery
		}
		if cfg, err = mysql.ParseDSN(dsn); err != nil {
			// The driver's messages name parameters, not the user or password.
			return nil, fmt.Errorf("%w: %q: %w", ErrUnknownScheme, RedactURL(rawURL), err)
		}
		if u.User != nil {
			cfg.User = u.User.Username()
			cfg.Passwd, _ = u.User.Password()
		}
	}
	cfg.ClientFoundRows = false
	cfg.MultiStatements = false
	// Interpolation (see openMySQL), unless the URL chooses it or a
	// character set; the driver then learns the server's
	// max_allowed_packet (one query per session) and prepares a statement
	// whose escaped arguments would not fit in it, as a payload of NUL
	// bytes escaped to twice its size.
	if params, err := url.ParseQuery(query); err == nil {
		if !mysqlParamSet(params, "interpolateParams", "charset", "collation", "character_set_client", "character_set_connection", "character_set_results") {
			cfg.InterpolateParams = true
			if !mysqlParamSet(params, "maxAllowedPacket") {
				cfg.MaxAllowedPacket = 0
			}
		}
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if _, set := cfg.Params["time_zone"]; !set {
		cfg.Params["time_zone"] = "'+00:00'"
	}
	if _, set := cfg.Params["sql_mode"]; !set {
		cfg.Params["sql_mode"] = "CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')"
	}
	return cfg, nil
}

// mysqlParamSet reports whether params has one of names, in any case.
func mysqlParamSet[V any](params map[string]V, names ...string) bool {
	for have := range params {
		for _, name := range names {
			if strings.EqualFold(have, name) {
				return true
			}
		}
	}
	return false
}

// isMySQLDSN reports whether s (a MySQL URL without "mysql://") is a
// go-sql-driver DSN with a protocol: [user[:password]@]tcp(address)/… or
// unix(path). net/url cannot parse it: "tcp(host:port)" is no host.
func isMySQLDSN(s string) bool {
	for _, proto := range []string{"tcp(", "unix("} {
		if strings.HasPrefix(s, proto) || strings.Contains(s, "@"+proto) {
			return true
		}
	}
	return false
}

// RedactURL replaces the password of a database URL (userinfo, also in a
// MySQL DSN after mysql://, and password= parameters) with "REDACTED"; see
// secret.RedactURL.
func RedactURL(raw string) string { return secret.RedactURL(raw) }

// ErrUnknownDatabase is returned (wrapped) by Open when the server has no
// database of the URL's name (PostgreSQL 3D000 invalid_catalog_name, MySQL
// and MariaDB 1049 ER_BAD_DB_ERROR): a name mistyped, or a database not
// created yet. bridge migrate creates tables, never the database.
var ErrUnknownDatabase = errors.New("the database does not exist")

// ErrReadOnly is returned (wrapped) by CheckWritable when the database
// does not accept the relay's writes.
var ErrReadOnly = errors.New("database does not accept writes")

// CheckWritable reports whether the database accepts the relay's writes,
// for readiness: on PostgreSQL the session is not on a standby
// (pg_is_in_recovery()) and not read-only (transaction_read_only, which
// default_transaction_read_only sets, as while a database is fenced during
// a failover); on MySQL the server does not run with read_only (which
// super_read_only also sets); SQLite is pinged. A read-only session is
// closed (database/sql Conn.Raw: a sqldriver.ErrBadConn from f discards the
// connection) and raises the fence (see sessionFence), so that the next
// check and the relay's next statements run on new sessions. Errors: ErrReadOnly (wrapped, saying why), or the error
// that reaching the database gave.
func (db *DB) CheckWritable(ctx context.Context) error {
	conn, err := db.SQL.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	why, err := db.driver.writable(ctx, conn)
	if err != nil {
		return err
	}
	if why != "" {
		if db.fence != nil {
			db.fence.raise()
		}
		_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
		return fmt.Errorf("%w: %s", ErrReadOnly, why)
	}
	return nil
}
