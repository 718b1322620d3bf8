package outbox

import "fmt"

// WALStatements are the statements of the postgres-wal source
// (internal/source/postgreswal) on the outbox table: queries/postgres/wal_*.sql,
// rendered for one table. Each file says its parameters and columns; the
// source runs them on its own sessions.
type WALStatements struct {
	// The marks after a PubAck or a failure, and the visibility check of a
	// mark that changed fewer rows than it named.
	MarkDone, DeleteDone, MarkDead, MarkFailed, MarkCheck string
	// Reread reads the rows read again from the slot; Asides the failed
	// rows of ordering keys; StillFailed and StillPending which rows are
	// still failed, or pending or failed.
	Reread, Asides, StillFailed, StillPending string
	// Waiting and OldestWaiting are the stall watch's and the lag's reads.
	Waiting, OldestWaiting string
	// SweepRead reads the rows the sweep publishes; Release makes due the
	// failed rows that waited for a row set aside.
	SweepRead, Release string
}

func takeWALStatements(f *queryFiles) WALStatements {
	return WALStatements{
		MarkDone: f.take("wal_mark_done"), DeleteDone: f.take("wal_delete_done"), MarkDead: f.take("wal_mark_dead"),
		MarkFailed: f.take("wal_mark_failed"), MarkCheck: f.take("wal_mark_check"),
		Reread: f.take("wal_reread"), Asides: f.take("wal_asides"), StillFailed: f.take("wal_still_failed"),
		StillPending: f.take("wal_still_pending"), Waiting: f.take("wal_waiting"), OldestWaiting: f.take("wal_oldest_waiting"),
		SweepRead: f.take("wal_sweep_read"), Release: f.take("wal_release"),
	}
}

// WALStatements returns the postgres-wal source's statements for the
// store's table; false when the store is not on PostgreSQL.
func (s *Store) WALStatements() (WALStatements, bool) {
	e, ok := s.exec.(*postgresExecutor)
	if !ok {
		return WALStatements{}, false
	}
	return e.wal, true
}

// PostgresWALStatements renders the postgres-wal source's statements for
// table (schema-qualified or not) without a database, for tests of their
// plans. Errors: a table name ParseTableName refuses.
func PostgresWALStatements(table string) (WALStatements, error) {
	t, err := ParseTableName(table)
	if err != nil {
		return WALStatements{}, err
	}
	ex, err := postgresDriver{}.executor(&DB{driver: postgresDriver{}}, t)
	if err != nil {
		return WALStatements{}, fmt.Errorf("render the WAL source's statements: %w", err)
	}
	return ex.(*postgresExecutor).wal, nil
}
