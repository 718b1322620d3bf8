package source

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// SweepHealth is what the last sweep of a log source (postgres-wal,
// mysql-binlog) found, for readiness. The sweep is the one read of the
// outbox table that runs while the log brings none of its rows: a table
// renamed or dropped under the relay fails nothing else (the log's rows
// of it no longer name it, or there are none). The zero value is a sweep
// that has not failed.
type SweepHealth struct{ last atomic.Pointer[sweepFault] }

type sweepFault struct {
	err  error
	gone bool
}

// Failed records a failed sweep of table and logs it: lookErr is the
// error of looking the table up after the failure; outbox.ErrNoTable
// (wrapped) means it is gone (renamed or dropped), an ERROR; otherwise the
// sweep's err, a WARN with msg.
func (h *SweepHealth) Failed(logger *slog.Logger, table string, err, lookErr error, msg string) {
	if errors.Is(lookErr, outbox.ErrNoTable) {
		h.last.Store(&sweepFault{err: TableGone(table), gone: true})
		logger.Error("sweep: the outbox table is gone", slog.Any("error", TableGone(table)))
		return
	}
	h.last.Store(&sweepFault{err: fmt.Errorf("the sweep of %s failed; the rows the log does not bring wait for the next: %w", table, err)})
	logger.Warn(msg, slog.Any("error", err))
}

// Completed records a sweep that read the table to its end.
func (h *SweepHealth) Completed() { h.last.Store(nil) }

// Err is the readiness of the last sweep: nil when it completed (or none
// ran yet); an error naming the table when it found none; a
// health.Degraded error with the sweep's error otherwise. It lasts until
// a sweep completes.
func (h *SweepHealth) Err() error {
	f := h.last.Load()
	switch {
	case f == nil:
		return nil
	case f.gone:
		return f.err
	}
	return health.Degraded(f.err)
}

// TableGone is the readiness error of a relay whose outbox table is no
// longer there (renamed or dropped while it ran).
func TableGone(table string) error {
	return fmt.Errorf("outbox table %s not found (renamed or dropped while the relay ran?): no row of it is relayed; "+
		"restore it (the rows it holds are relayed once it is back), or stop the relay and run bridge migrate for a new, empty one", table)
}
