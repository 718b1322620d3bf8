package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver (no cgo)
)

// AcceptedSchemes lists the database URL forms Open accepts.
const AcceptedSchemes = "postgres://…, postgresql://…, sqlite:PATH"

// ErrUnknownScheme is returned (wrapped) by Open for a URL it cannot open.
var ErrUnknownScheme = errors.New("unknown database URL scheme")

// DB is an open outbox database.
type DB struct {
	SQL     *sql.DB
	dialect dialect
	// Redacted is the URL without its password, for logs and messages.
	Redacted string
}

// Dialect names the database kind: "postgres" or "sqlite".
func (db *DB) Dialect() string { return db.dialect.name() }

// Close closes the connection pool.
func (db *DB) Close() error { return db.SQL.Close() }

// Open opens the database at rawURL: postgres://… or postgresql://… (pgx;
// TLS through sslmode, sslrootcert and the other libpq parameters) or
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
		return nil, fmt.Errorf("%w: %q: MySQL/MariaDB outboxes are not supported by this version yet; accepted: %s", ErrUnknownScheme, RedactURL(rawURL), AcceptedSchemes)
	}
	return nil, fmt.Errorf("%w: %q; accepted: %s", ErrUnknownScheme, RedactURL(rawURL), AcceptedSchemes)
}

func openPostgres(ctx context.Context, rawURL string) (*DB, error) {
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
