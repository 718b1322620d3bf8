package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver (no cgo)
)

// AcceptedSchemes lists the database URL forms Open accepts.
const AcceptedSchemes = "postgres://…, postgresql://…, mysql://…, sqlite:PATH"

// ErrUnknownScheme is returned (wrapped) by Open for a URL it cannot open:
// an unknown scheme, or a URL or parameter its driver cannot parse.
var ErrUnknownScheme = errors.New("invalid database URL")

// DB is an open outbox database.
type DB struct {
	SQL     *sql.DB
	dialect dialect
	// Redacted is the URL without its password, for logs and messages.
	Redacted string
}

// Dialect names the database kind: "postgres", "mysql" or "sqlite".
func (db *DB) Dialect() string { return db.dialect.name() }

// Close closes the connection pool.
func (db *DB) Close() error { return db.SQL.Close() }

// Open opens the database at rawURL: postgres://… or postgresql://… (pgx;
// TLS through sslmode, sslrootcert and the other libpq parameters),
// mysql://user:pass@host:port/db?param=value (MySQL 8.0.16+ or MariaDB
// 10.6+ through go-sql-driver/mysql; see openMySQL for the parameters) or
// sqlite:PATH (modernc.org/sqlite, no cgo; the file and its directory are
// created when missing). SQLite is opened in WAL mode with a 10 s busy
// timeout so that producer processes can write the same file while the relay
// runs. It pings the database before returning.
//
// Errors: ErrUnknownScheme (wrapped, naming the value and AcceptedSchemes)
// for any other URL; otherwise the driver's connection error.
func Open(ctx context.Context, rawURL string) (*DB, error) {
	switch {
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		return openPostgres(ctx, rawURL)
	case strings.HasPrefix(rawURL, "sqlite:"):
		return openSQLite(ctx, strings.TrimPrefix(rawURL, "sqlite:"))
	case strings.HasPrefix(rawURL, "mysql://"):
		return openMySQL(ctx, rawURL)
	}
	return nil, fmt.Errorf("%w: %q; accepted: %s", ErrUnknownScheme, RedactURL(rawURL), AcceptedSchemes)
}

func openPostgres(ctx context.Context, rawURL string) (*DB, error) {
	// Parsed first so that a bad parameter (sslmode=bogus, a bad port) is
	// told apart from a server that cannot be reached.
	if _, err := pgconn.ParseConfig(rawURL); err != nil {
		for inner := errors.Unwrap(err); inner != nil; inner = errors.Unwrap(inner) {
			err = inner // the outermost error repeats the URL
		}
		return nil, fmt.Errorf("%w: %q: %v; accepted: postgres://user:password@host:port/database?sslmode=…, with libpq's parameters", ErrUnknownScheme, RedactURL(rawURL), err)
	}
	sqlDB, err := sql.Open("pgx", rawURL)
	if err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", RedactURL(rawURL), err)
	}
	db := &DB{SQL: sqlDB, dialect: postgresDialect{}, Redacted: RedactURL(rawURL)}
	if err := db.SQL.PingContext(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("connect to postgres %s: %w", db.Redacted, err)
	}
	return db, nil
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
	db := &DB{SQL: sqlDB, dialect: sqliteDialect{}, Redacted: "sqlite:" + path}
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
//     older MariaDB; openMySQL asks the server which one it knows;
//   - clientFoundRows off and no multi-statements, whatever the URL says:
//     affected-row counts are rows changed (Enqueue and the fenced marks
//     count on it), and every statement is sent on its own.
//
// Times are read as text (parseTime=false unless the URL asks otherwise);
// both forms are understood.
func openMySQL(ctx context.Context, rawURL string) (*DB, error) {
	cfg, err := mysqlConfig(rawURL)
	if err != nil {
		return nil, err
	}
	_, rc := cfg.Params["transaction_isolation"]
	if _, set := cfg.Params["tx_isolation"]; !rc && !set {
		name, err := mysqlIsolationVariable(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("connect to mysql %s: %w", RedactURL(rawURL), err)
		}
		cfg.Params[name] = "'READ-COMMITTED'"
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open mysql %s: %w", RedactURL(rawURL), err)
	}
	sqlDB := sql.OpenDB(connector)
	// Servers close idle connections after wait_timeout (8 h by default) and
	// proxies often sooner; the driver's README recommends a short lifetime.
	sqlDB.SetConnMaxLifetime(3 * time.Minute)
	db := &DB{SQL: sqlDB, dialect: mysqlDialect{}, Redacted: RedactURL(rawURL)}
	if err := db.SQL.PingContext(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("connect to mysql %s: %w", db.Redacted, err)
	}
	return db, nil
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
	case mysqlCode(err) == 1193:
		return "tx_isolation", nil
	}
	return "", err
}

// mysqlConfig turns mysql://user:pass@host:port/db?param=value into the
// driver's configuration (user:pass@tcp(host:port)/db?param=value).
func mysqlConfig(rawURL string) (*mysql.Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, password included.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		shown := rawURL
		if at := strings.LastIndex(shown, "@"); at >= 0 {
			shown = "mysql://REDACTED" + shown[at:]
		}
		return nil, fmt.Errorf("%w: %q: %v (percent-encode special characters of the user and password); accepted: mysql://user:password@host:port/database?param=value", ErrUnknownScheme, shown, err)
	}
	if u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("%w: %q has no host; accepted: mysql://user:password@host:port/database?param=value", ErrUnknownScheme, RedactURL(rawURL))
	}
	base := mysql.NewConfig()
	base.Net = "tcp"
	base.Addr = u.Host
	if u.Port() == "" {
		base.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	base.DBName = strings.TrimPrefix(u.Path, "/")
	if u.User != nil {
		base.User = u.User.Username()
		base.Passwd, _ = u.User.Password()
	}
	// The driver parses its own parameters (and validates tls=…) from a
	// DSN; FormatDSN writes user, password, address and database in its
	// syntax, and the URL's query is already in DSN form.
	dsn := base.FormatDSN()
	if u.RawQuery != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + u.RawQuery
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrUnknownScheme, RedactURL(rawURL), err)
	}
	cfg.ClientFoundRows = false
	cfg.MultiStatements = false
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

var dsnPassword = regexp.MustCompile(`(?i)(password=)[^&\s]*`)

// RedactURL replaces the password of a database URL (userinfo and
// password= parameters) with "REDACTED".
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
			raw = u.String()
		}
	}
	return dsnPassword.ReplaceAllString(raw, "${1}REDACTED")
}
