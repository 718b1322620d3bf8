package outbox

import (
	"context"
	"database/sql/driver"
	"time"
)

// mysqlConnector wraps go-sql-driver/mysql's connector so that a session
// the server refuses writes on is closed at once instead of going back to
// the pool: after a failover (or a DNS flip) a pooled session can stay
// connected to the old, now read-only primary and fail every write until
// it is replaced. The driver has no hook for this (unlike pgx's
// pgconn.Config.OnPgError), hence the wrapper: a closed session answers
// false to driver.Validator.IsValid, and database/sql discards it when it
// is returned to the pool (database/sql putConn, validateConnection).
type mysqlConnector struct {
	driver.Connector
	fence *sessionFence
}

func (c mysqlConnector) Connect(ctx context.Context) (driver.Conn, error) {
	connectedAt := time.Now()
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &mysqlSession{Conn: conn, fence: c.fence, connectedAt: connectedAt}, nil
}

// mysqlSessionUnusable reports whether err means that the session cannot
// serve the relay: 1290 ER_OPTION_PREVENTS_STATEMENT (the server runs with
// read_only or super_read_only) or 1792 ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION.
func mysqlSessionUnusable(err error) bool {
	switch mysqlCode(err) {
	case 1290, 1792:
		return true
	}
	return false
}

// mysqlSession is one session of go-sql-driver/mysql. It passes every
// call on, with each interface the driver's connection implements
// (database/sql asks for them by type assertion). When a statement fails
// with an error of mysqlSessionUnusable it closes the session and raises
// the fence; a session older than the fence is not reused.
type mysqlSession struct {
	driver.Conn
	fence       *sessionFence
	connectedAt time.Time
}

var (
	_ driver.ConnBeginTx        = (*mysqlSession)(nil)
	_ driver.ConnPrepareContext = (*mysqlSession)(nil)
	_ driver.ExecerContext      = (*mysqlSession)(nil)
	_ driver.QueryerContext     = (*mysqlSession)(nil)
	_ driver.Pinger             = (*mysqlSession)(nil)
	_ driver.SessionResetter    = (*mysqlSession)(nil)
	_ driver.Validator          = (*mysqlSession)(nil)
	_ driver.NamedValueChecker  = (*mysqlSession)(nil)
	_ driver.StmtExecContext    = (*mysqlStmt)(nil)
	_ driver.StmtQueryContext   = (*mysqlStmt)(nil)
	_ driver.NamedValueChecker  = (*mysqlStmt)(nil)
	_ driver.Connector          = mysqlConnector{}
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

func (s *mysqlSession) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := s.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	return tx, s.checked(err)
}

func (s *mysqlSession) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	stmt, err := s.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, s.checked(err)
	}
	return &mysqlStmt{stmt, s}, nil
}

// ExecContext returns the driver's driver.ErrSkip (arguments without
// interpolateParams) as it is: database/sql then prepares the statement.
func (s *mysqlSession) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	res, err := s.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	return res, s.checked(err)
}

func (s *mysqlSession) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := s.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	return rows, s.checked(err)
}

func (s *mysqlSession) Ping(ctx context.Context) error {
	return s.Conn.(driver.Pinger).Ping(ctx)
}

func (s *mysqlSession) ResetSession(ctx context.Context) error {
	if s.fence.stale(s.connectedAt) {
		return driver.ErrBadConn
	}
	return s.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (s *mysqlSession) IsValid() bool {
	return s.Conn.(driver.Validator).IsValid()
}

func (s *mysqlSession) CheckNamedValue(nv *driver.NamedValue) error {
	return s.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

// mysqlStmt is a prepared statement of a mysqlSession.
type mysqlStmt struct {
	driver.Stmt
	session *mysqlSession
}

func (st *mysqlStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	res, err := st.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
	return res, st.session.checked(err)
}

func (st *mysqlStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := st.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	return rows, st.session.checked(err)
}

func (st *mysqlStmt) CheckNamedValue(nv *driver.NamedValue) error {
	return st.Stmt.(driver.NamedValueChecker).CheckNamedValue(nv)
}
