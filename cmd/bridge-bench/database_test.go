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
	return databasePhaseWith(t, settings{DatabaseURL: dbURL, Rows: rows, OrderingKeys: keys, DeleteOnRelay: del})
}

// databasePhaseWith runs the database phase with s, the phase's other
// settings filled in.
func databasePhaseWith(t *testing.T, s settings) *results {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s.PayloadBytes, s.BatchSize, s.MaxInFlight = 256, 500, 2000
	s.Phases, s.Source, s.Relays, s.Rate, s.HighRate = "database", "table", 1, 1, 1
	res, err := bench(ctx, s)
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

// TestDatabasePhaseFillFactor: with room on each page (--fillfactor), the
// claim's and the mark's new row versions stay on the row's page and
// PostgreSQL logs only what changed, the payload not again: less WAL per
// row than on the table as migrated. A checkpoint during a drain adds
// full-page images to its WAL, so a pair of drains with one is run again.
func TestDatabasePhaseFillFactor(t *testing.T) {
	url := bridgetest.PostgresURL(t)
	if localServerCommands(url) == nil {
		skipUnlessCI(t, "the PostgreSQL test server is not on this machine: its WAL cannot be read")
	}
	for try := 1; ; try++ {
		full := databasePhaseWith(t, settings{DatabaseURL: url, Rows: 2000})
		roomy := databasePhaseWith(t, settings{DatabaseURL: url, Rows: 2000, FillFactor: 50})
		require.NotNil(t, full.DatabasePhaseWALBytesPerRow, full.databaseNotMeasured)
		require.NotNil(t, roomy.DatabasePhaseWALBytesPerRow, roomy.databaseNotMeasured)
		if (*full.DatabasePhaseCheckpoints > 0 || *roomy.DatabasePhaseCheckpoints > 0) && try < 3 {
			continue
		}
		assert.Less(t, *roomy.DatabasePhaseWALBytesPerRow, 0.8**full.DatabasePhaseWALBytesPerRow,
			"WAL per row at fillfactor 50 against 100")
		return
	}
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
