package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// databasePhase runs bench with the database phase alone over rows rows.
func databasePhase(t *testing.T, dbURL string, rows, keys int, del bool) *results {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := bench(ctx, settings{
		DatabaseURL: dbURL, Rows: rows, PayloadBytes: 256, BatchSize: 500, MaxInFlight: 2000,
		Phases: "database", Source: "table", Relays: 1, Rate: 1, HighRate: 1,
		OrderingKeys: keys, DeleteOnRelay: del,
	})
	require.NoError(t, err) // the phase fails unless every row was marked once
	require.Positive(t, res.DatabasePhaseRowsPerS)
	require.NotNil(t, res.DatabasePhaseClientCPUUsPerRow)
	return res
}

// TestDatabasePhasePostgres: the database phase drains the table through
// the Store and reads the backend's CPU, the WAL and the HOT share.
func TestDatabasePhasePostgres(t *testing.T) {
	url := bridgetest.PostgresURL(t)
	if localServerCommands(url) == nil {
		skipUnlessCI(t, "the PostgreSQL test server is not on this machine: its backend's CPU cannot be read")
	}
	t.Run("done", func(t *testing.T) {
		res := databasePhase(t, url, 5000, 0, false)
		require.NotNil(t, res.DatabasePhaseCPUUsPerRow, res.databaseNotMeasured)
		assert.Positive(t, *res.DatabasePhaseCPUUsPerRow)
		assert.Positive(t, *res.DatabasePhaseClaimUsPerRow)
		assert.Positive(t, *res.DatabasePhaseMarkUsPerRow)
		// The claim and the mark each write a new version of every row,
		// its 256-byte payload included, unless the update is HOT.
		require.NotNil(t, res.DatabasePhaseWALBytesPerRow)
		assert.Greater(t, *res.DatabasePhaseWALBytesPerRow, 256.0)
		require.NotNil(t, res.DatabasePhaseHOTUpdatePct)
		assert.InDelta(t, 50, *res.DatabasePhaseHOTUpdatePct, 50)
		require.NotNil(t, res.DatabasePhaseCheckpoints)
	})
	t.Run("delete_on_relay, ordering keys", func(t *testing.T) {
		// 40 keys: every claim takes at most 40 heads, the next finds
		// none until a mark is written.
		res := databasePhase(t, url, 2000, 40, true)
		require.NotNil(t, res.DatabasePhaseCPUUsPerRow, res.databaseNotMeasured)
		assert.Positive(t, *res.DatabasePhaseClaimUsPerRow)
	})
}

// TestDatabasePhaseMySQL: on MySQL or MariaDB the connection's thread is
// read, and the redo log's bytes.
func TestDatabasePhaseMySQL(t *testing.T) {
	url := bridgetest.MySQLURL(t)
	if localServerCommands(url) == nil {
		skipUnlessCI(t, "the MySQL test server is not on this machine: its threads' CPU cannot be read")
	}
	res := databasePhase(t, url, 3000, 0, false)
	require.NotNil(t, res.DatabasePhaseCPUUsPerRow, res.databaseNotMeasured)
	assert.Positive(t, *res.DatabasePhaseCPUUsPerRow)
	require.NotNil(t, res.DatabasePhaseWALBytesPerRow)
	assert.Positive(t, *res.DatabasePhaseWALBytesPerRow)
	assert.Nil(t, res.DatabasePhaseHOTUpdatePct)
}

// TestDatabasePhaseSQLite: SQLite runs in this process; no server CPU.
func TestDatabasePhaseSQLite(t *testing.T) {
	res := databasePhase(t, "sqlite:"+filepath.Join(t.TempDir(), "outbox.db"), 3000, 7, false)
	assert.Nil(t, res.DatabasePhaseCPUUsPerRow)
	assert.Contains(t, res.databaseNotMeasured, "SQLite")
	assert.Nil(t, res.DatabasePhaseWALBytesPerRow)
}

// skipUnlessCI skips the test, or fails it in CI (CI=true), where .ci/run
// starts the database servers on this machine.
func skipUnlessCI(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}
