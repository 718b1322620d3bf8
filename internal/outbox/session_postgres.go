package outbox

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgStatements chooses how a PostgreSQL pool runs its statements when the
// URL does not name a default_query_exec_mode:
//
//   - on sessions connected to the server directly, as named prepared
//     statements (pgx's cache_statement): each statement is parsed and
//     planned once per session. The claim's plan alone costs about 1 ms of
//     backend CPU (2-core machine, PostgreSQL 15), so this cuts an idle
//     relay's database CPU to about a third and a small claim's time by
//     about 40 % (BENCHMARKS.md, "Prepared statements on a direct
//     connection");
//   - behind a connection pooler, without a named prepared statement (pgx's
//     cache_describe: parse, bind and run in one round trip), which a pooler
//     in transaction or statement mode would otherwise move between server
//     sessions (42P05 "prepared statement … already exists", 26000 "…
//     does not exist").
//
// A pooler is told as ListenPostgres tells it: by the process id the
// session announced at connect (BackendKeyData), which is the pooler's
// own, against the server's pg_backend_pid(). A session is opened before
// the first answer is known, so the pool's first session runs without
// named statements (openPostgres then retires it). A pooler that passes the
// server's process id on is caught by its first refusal: a 42P05 or 26000
// error naming one of pgx's statements (refused) marks the pool as pooled
// for good, closes that session and retires the others at their next use
// (sessionFence), and every later session runs without named statements
// (the statement that failed is retried by the relay, as any failed
// statement). A pool that turns from prepared to unnamed statements while
// it runs says so once, at WARN, on logger (nil: no line): the start-up
// line's statements=prepared no longer holds.
type pgStatements struct {
	state  atomic.Int32
	logger *slog.Logger
}

const (
	pgSessionsUnknown int32 = iota // no session has answered yet
	pgSessionsDirect               // connected to the server itself
	pgSessionsPooled               // behind a pooler: never prepared again
)

// beforeConnect sets the new session's statement mode from what the
// sessions before it answered.
func (p *pgStatements) beforeConnect(_ context.Context, cfg *pgx.ConnConfig) error {
	if p.state.Load() == pgSessionsDirect {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	}
	return nil
}

// errSessionBehindPooler is the refusal of a new session that was opened with
// named prepared statements and turned out to be behind a pooler. It is
// kept apart from errBehindPooler, the LISTEN session's: a statement of the
// pool that fails with it does not make ListenPostgres stop listening. It ends
// a statement only when database/sql's attempts run out before a session
// without them is opened, and the next run finds one: a conflict that
// running again resolves (logged at WARN, see FailureLevel).
var errSessionBehindPooler = errors.New("session reached the server through a pooler")

// connected records what the new session conn answered: serverPID is its
// pg_backend_pid(). A session opened with named statements that turns out
// to be behind a pooler is refused (driver.ErrBadConn: database/sql opens
// another, now without them).
func (p *pgStatements) connected(conn *pgx.Conn, serverPID uint32) error {
	if announced := conn.PgConn().PID(); serverPID != announced {
		p.pooled(slog.String("reason", fmt.Sprintf("a new session's process id %d is not the one it announced, %d", serverPID, announced)))
		if conn.Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
			return fmt.Errorf("%w (process id %d, announced %d): reconnecting without named prepared statements: %w",
				errSessionBehindPooler, serverPID, announced, sqldriver.ErrBadConn)
		}
		return nil
	}
	p.state.CompareAndSwap(pgSessionsUnknown, pgSessionsDirect)
	return nil
}

// refused reports whether e is a pooler's refusal of one of the pool's
// named prepared statements (42P05 duplicate_prepared_statement, 26000
// invalid_sql_statement_name, naming a statement of pgx's cache, whose
// names begin with "stmtcache_" and which the server's message quotes as
// they are in any language), and if so marks the pool as pooled. The same
// codes raised for anything else (a function's RAISE SQLSTATE '26000')
// leave the pool as it is.
func (p *pgStatements) refused(e *pgconn.PgError) bool {
	if e.Code != "42P05" && e.Code != "26000" || !strings.Contains(e.Message, "stmtcache_") {
		return false
	}
	p.pooled(slog.String("reason", "the server refused a named prepared statement"), slog.String("sqlstate", e.Code))
	return true
}

// pooled marks the pool as pooled for good and, when it was direct until
// now, logs why.
func (p *pgStatements) pooled(why ...any) {
	if p.state.Swap(pgSessionsPooled) == pgSessionsDirect && p.logger != nil {
		p.logger.Warn("PostgreSQL sessions reach the server through a connection pooler now: new sessions run without named prepared statements, the others are retired",
			append([]any{slog.String("statements", "unnamed")}, why...)...)
	}
}

// prepared reports whether new sessions run named prepared statements;
// false on a nil pgStatements (the URL chose the mode).
func (p *pgStatements) prepared() bool { return p != nil && p.state.Load() == pgSessionsDirect }
