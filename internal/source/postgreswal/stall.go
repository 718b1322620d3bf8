package postgreswal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outbox-bridge/bridge/internal/source"
)

// stallSample is how many of the oldest waiting rows the stall watch
// follows to tell whether anyone relays them.
const stallSample = 100

// StallSource returns what source.StallWatch asks of this relay (see
// stallSource): the stall watch of source: table, over the slot.
func (s *Subscriber) StallSource() source.StallSource { return &stallSource{s: s} }

// stallSource tells a stalled postgres-wal relay. Rows move when this
// relay hands one to the publisher (as a claim does for source: table) or
// settles one (a PubAck marked, a dead letter, a row set aside), and when
// a stream session starts.
// Once nothing moved for relay.stall_after, rows wait while nothing
// relays them when:
//
//   - a row read from the slot has waited for stall_after (its commit
//     time, database clock): this relay's own pipeline does not relay it
//     (NATS unreachable, a stuck publish); or
//   - rows have been pending or failed in the table for stall_after +
//     wal.sweep_interval (rows the slot does not deliver wait for the
//     sweep) and none of the oldest of them (up to 100, by id) left that
//     state for stall_after: nobody relays them — a standby's slot holder
//     that does not relay (pg_recvlogical, a frozen relay whose walsender
//     has not timed out), or this relay's stream that delivers nothing.
//     A row set aside in its backoff is not waiting (its available_at is
//     ahead), nor are the rows of its ordering key set aside behind it.
//
// A stall of a standby, or of a relay whose stream does not run or whose
// marks fail, is excused from liveness: restarting this process would not
// free the slot, start the stream or reach the database.
type stallSource struct {
	s *Subscriber

	mu      sync.Mutex
	sample  []int64   // the oldest waiting rows at the last check, by id
	movedAt time.Time // when one of them last moved (or was first seen)
}

// Inherit takes over what prev, an earlier subscriber of this process,
// counted, and when it last moved rows: the counters go on from its totals
// (bridge_wal_* counters do not fall back to zero when the relay is rebuilt)
// and a stall goes on from its last progress. Call it before Subscribe.
func (s *Subscriber) Inherit(prev *Subscriber) {
	s.Counters.add(&prev.Counters)
	s.progress.Store(min(s.progress.Load(), prev.progress.Load()))
}

func (w *stallSource) LastProgress() time.Time { return time.Unix(0, w.s.progress.Load()) }

func (w *stallSource) Stalled(ctx context.Context, after time.Duration) (bool, string, error) {
	s := w.s
	w.mu.Lock()
	defer w.mu.Unlock()
	st := s.stream.state.Load()
	if st.streaming && s.windowLag() >= after {
		cause := "rows read from the replication slot have waited for longer than relay.stall_after and this relay relayed none"
		if s.waitingNATS.Load() {
			cause += "; their publishes wait for NATS to be connected"
		}
		return true, cause, nil
	}
	ids, err := s.waitingRows(ctx, after+s.cfg.SweepInterval)
	if err != nil {
		return false, "", err
	}
	now := time.Now()
	switch {
	case len(ids) == 0:
		w.sample = nil
		return false, "", nil
	case w.sample == nil || moved(w.sample, ids):
		w.sample, w.movedAt = ids, now
		return false, "", nil
	}
	w.sample = ids
	if now.Sub(w.movedAt) < after {
		return false, "", nil
	}
	switch {
	case st.standby:
		return true, fmt.Sprintf("standby: rows have been pending for longer than relay.stall_after + wal.sweep_interval and none moves: "+
			"replication slot %s is held by %s, which does not relay them; stop it if it is not a relay (or end its walsender with pg_terminate_backend); "+
			"a frozen relay's walsender ends after wal_sender_timeout, and this relay then takes the slot over", s.cfg.Slot, st.holder), nil
	case st.streaming:
		return true, "rows have been pending for longer than relay.stall_after + wal.sweep_interval and this relay, streaming from the replication slot, read and relayed none of them", nil
	}
	return true, "rows have been pending for longer than relay.stall_after + wal.sweep_interval and the replication stream does not run (see /readyz, replication)", nil
}

// Excuse: see stallSource.
func (w *stallSource) Excuse() string {
	s := w.s
	st := s.stream.state.Load()
	switch {
	case st.standby:
		return "standby: another process holds the replication slot"
	case !st.streaming:
		return "the replication stream does not run"
	case s.markWrites.Failing() || s.checkReads.Failing():
		return "marks fail"
	}
	return ""
}

// moved reports whether a row of prev is no longer among the waiting rows
// now: settled or deleted. A row past the end of a full sample now is not
// a move (rows with lower ids joined the sample).
func moved(prev, now []int64) bool {
	for _, id := range prev {
		if _, found := slices.BinarySearch(now, id); !found && (len(now) < stallSample || id < now[len(now)-1]) {
			return true
		}
	}
	return false
}

// waitingRows returns the ids of the oldest rows (up to stallSample, in id
// order) pending or failed whose available_at is more than age ago
// (database clock).
func (s *Subscriber) waitingRows(ctx context.Context, age time.Duration) ([]int64, error) {
	rows, err := s.db.SQL.QueryContext(ctx, s.q.Waiting, age.Microseconds(), stallSample)
	if err != nil {
		return nil, fmt.Errorf("look for waiting outbox rows: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("look for waiting outbox rows: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// describeHolder names the process that holds the slot, from
// pg_replication_slots and pg_stat_activity: its pid, application_name
// and client address where this role may read them.
func (st *slotStream) describeHolder() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pid sql.NullInt64
	var app, client sql.NullString
	err := st.db.SQL.QueryRowContext(ctx, `SELECT s.active_pid, a.application_name, host(a.client_addr)
FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid WHERE s.slot_name = $1`, st.cfg.Slot).Scan(&pid, &app, &client)
	if err != nil || !pid.Valid {
		return "another process (not readable: " + strings.TrimSpace(fmt.Sprint(err)) + ")"
	}
	d := fmt.Sprintf("pid %d", pid.Int64)
	var more []string
	if app.Valid && app.String != "" {
		more = append(more, fmt.Sprintf("application_name %q", app.String))
	}
	if client.Valid && client.String != "" {
		more = append(more, "client "+client.String)
	}
	if len(more) > 0 {
		d += " (" + strings.Join(more, ", ") + ")"
	}
	return d
}

// readTableLag reads the age of the oldest pending or failed row, for
// LagSeconds while this relay does not stream; on error it keeps the last.
func (s *Subscriber) readTableLag() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var age sql.NullFloat64
	err := s.db.SQL.QueryRowContext(ctx, s.q.OldestWaiting).Scan(&age)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		s.tableLag.Store(nil)
	case err == nil:
		s.tableLag.Store(&tableLag{age: time.Duration(max(age.Float64, 0) * float64(time.Second)), at: time.Now()})
	}
}
