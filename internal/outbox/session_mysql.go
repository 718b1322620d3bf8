package outbox

import (
	"context"
	sqldriver "database/sql/driver"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// mysqlConnector wraps go-sql-driver/mysql's connector so that a session
// the server refuses writes on is closed at once instead of going back to
// the pool: after a failover (or a DNS flip) a pooled session can stay
// connected to the old, now read-only primary and fail every write until
// it is replaced. The driver has no hook for this (unlike pgx's
// pgconn.Config.OnPgError), hence the wrapper: a closed session answers
// false to sqldriver.Validator.IsValid, and database/sql discards it when it
// is returned to the pool (database/sql putConn, validateConnection).
type mysqlConnector struct {
	sqldriver.Connector
	fence *sessionFence
}

func (c mysqlConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	connectedAt := time.Now()
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &mysqlSession{Conn: conn, fence: c.fence, connectedAt: connectedAt}, nil
}

// mysqlSessionUnusable reports whether err means that the session cannot
// serve the relay: the server runs with read_only or super_read_only, or
// the transaction is read-only (errorReadOnly: 1290, 1792).
func mysqlSessionUnusable(err error) bool {
	return mysqlDriver{}.classify(err) == errorReadOnly
}

// mysqlSession is one session of go-sql-driver/mysql. It passes every
// call on, with each interface the driver's connection implements
// (database/sql asks for them by type assertion). When a statement fails
// with an error of mysqlSessionUnusable it closes the session and raises
// the fence; a session older than the fence is not reused.
type mysqlSession struct {
	sqldriver.Conn
	fence       *sessionFence
	connectedAt time.Time
}

var (
	_ sqldriver.ConnBeginTx        = (*mysqlSession)(nil)
	_ sqldriver.ConnPrepareContext = (*mysqlSession)(nil)
	_ sqldriver.ExecerContext      = (*mysqlSession)(nil)
	_ sqldriver.QueryerContext     = (*mysqlSession)(nil)
	_ sqldriver.Pinger             = (*mysqlSession)(nil)
	_ sqldriver.SessionResetter    = (*mysqlSession)(nil)
	_ sqldriver.Validator          = (*mysqlSession)(nil)
	_ sqldriver.NamedValueChecker  = (*mysqlSession)(nil)
	_ sqldriver.StmtExecContext    = (*mysqlStmt)(nil)
	_ sqldriver.StmtQueryContext   = (*mysqlStmt)(nil)
	_ sqldriver.NamedValueChecker  = (*mysqlStmt)(nil)
	_ sqldriver.Connector          = mysqlConnector{}
)

// checked closes the session when err says it cannot serve the relay, and
// returns err.
func (s *mysqlSession) checked(err error) error {
	if err != nil && mysqlSessionUnusable(err) {
		s.fence.raise()
		_ = s.Conn.Close()
	}
	return err
}

func (s *mysqlSession) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	tx, err := s.Conn.(sqldriver.ConnBeginTx).BeginTx(ctx, opts)
	return tx, s.checked(err)
}

func (s *mysqlSession) PrepareContext(ctx context.Context, query string) (sqldriver.Stmt, error) {
	stmt, err := s.Conn.(sqldriver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, s.checked(err)
	}
	return &mysqlStmt{stmt, s}, nil
}

// ExecContext returns the driver's sqldriver.ErrSkip (arguments without
// interpolateParams) as it is: database/sql then prepares the statement.
func (s *mysqlSession) ExecContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	res, err := s.Conn.(sqldriver.ExecerContext).ExecContext(ctx, query, args)
	return res, s.checked(err)
}

func (s *mysqlSession) QueryContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	rows, err := s.Conn.(sqldriver.QueryerContext).QueryContext(ctx, query, args)
	return rows, s.checked(err)
}

func (s *mysqlSession) Ping(ctx context.Context) error {
	return s.Conn.(sqldriver.Pinger).Ping(ctx)
}

func (s *mysqlSession) ResetSession(ctx context.Context) error {
	if s.fence.stale(s.connectedAt) {
		return sqldriver.ErrBadConn
	}
	return s.Conn.(sqldriver.SessionResetter).ResetSession(ctx)
}

func (s *mysqlSession) IsValid() bool {
	return s.Conn.(sqldriver.Validator).IsValid()
}

func (s *mysqlSession) CheckNamedValue(nv *sqldriver.NamedValue) error {
	return s.Conn.(sqldriver.NamedValueChecker).CheckNamedValue(nv)
}

// mysqlStmt is a prepared statement of a mysqlSession.
type mysqlStmt struct {
	sqldriver.Stmt
	session *mysqlSession
}

func (st *mysqlStmt) ExecContext(ctx context.Context, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	res, err := st.Stmt.(sqldriver.StmtExecContext).ExecContext(ctx, args)
	return res, st.session.checked(err)
}

func (st *mysqlStmt) QueryContext(ctx context.Context, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	rows, err := st.Stmt.(sqldriver.StmtQueryContext).QueryContext(ctx, args)
	return rows, st.session.checked(err)
}

func (st *mysqlStmt) CheckNamedValue(nv *sqldriver.NamedValue) error {
	return st.Stmt.(sqldriver.NamedValueChecker).CheckNamedValue(nv)
}

// LogMySQLDriver sends go-sql-driver/mysql's own log lines (a connection
// dropped under it: "unexpected EOF", "closing bad idle connection", …),
// which it otherwise prints to stderr as "[mysql] date file:line text", to
// logger at WARN with component "mysql-driver", so that a JSON log stays
// JSON. The driver's logger is global to the process: call it once, at
// start.
func LogMySQLDriver(logger *slog.Logger) {
	_ = mysql.SetLogger(mysqlDriverLog{logger.With(slog.String("component", "mysql-driver"))})
}

type mysqlDriverLog struct{ l *slog.Logger }

func (d mysqlDriverLog) Print(v ...any) { d.l.Warn(strings.TrimSpace(fmt.Sprint(v...))) }
