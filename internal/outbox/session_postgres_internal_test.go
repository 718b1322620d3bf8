package outbox

import (
	"context"
	sqldriver "database/sql/driver"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest/testdb"
)

// TestPostgresSessionBehindPoolerIsRetriedAtWarn: a new session opened with
// named prepared statements whose pg_backend_pid() is not the process id it
// announced (a pooler came between the relay and the server while it ran)
// is refused as a bad connection, so that database/sql opens another
// without them, and the statement that fails when database/sql's attempts
// run out is a conflict, logged at WARN: the next run opens a session
// without named statements.
func TestPostgresSessionBehindPoolerIsRetriedAtWarn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(testdb.PostgresURL(t))
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })

	var p pgStatements
	p.state.Store(pgSessionsDirect)
	err = p.connected(conn, conn.PgConn().PID()+1) // what a pooler's session answers
	require.ErrorIs(t, err, sqldriver.ErrBadConn, "database/sql opens another session")
	require.False(t, p.prepared(), "the next session runs without named statements")
	require.Equal(t, slog.LevelWarn, FailureLevel(fmt.Errorf("claim: %w", err)))
	require.Equal(t, slog.LevelError, FailureLevel(fmt.Errorf("claim: %w", sqldriver.ErrBadConn)), "another bad connection")
}
