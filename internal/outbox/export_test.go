package outbox

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// PostgresClaimSQL exposes the PostgreSQL claim statement (claim.sql) to
// tests.
func PostgresClaimSQL(table string) (string, bool) {
	ex, ok := executorFor(postgresDriver{}, table)
	if !ok {
		return "", false
	}
	return ex.(*postgresExecutor).q.claim, true
}

// PostgresReadSQL exposes the PostgreSQL stall check (stalled.sql) and
// oldest failed row (oldest_failed.sql) to tests.
func PostgresReadSQL(table string) (stalled, oldestFailed string, ok bool) {
	ex, ok := executorFor(postgresDriver{}, table)
	if !ok {
		return "", "", false
	}
	e := ex.(*postgresExecutor)
	return e.q.stalled, e.oldestFailed, true
}

// PostgresMarkSQL exposes the PostgreSQL marks (mark_done.sql,
// delete_done.sql, mark_failed.sql) to tests.
func PostgresMarkSQL(table string) (done, del, failed string, ok bool) {
	ex, ok := executorFor(postgresDriver{}, table)
	if !ok {
		return "", "", "", false
	}
	q := ex.(*postgresExecutor).q
	return q.markDone, q.deleteDone, q.markFailed, true
}

// PostgresReplayReadSQL exposes the PostgreSQL replay read
// (replay_read.sql) to tests.
func PostgresReplayReadSQL(table string) (string, bool) {
	ex, ok := executorFor(postgresDriver{}, table)
	if !ok {
		return "", false
	}
	return ex.(*postgresExecutor).replayRead, true
}

// SQLiteClaimSQL exposes the SQLite claim statement (claim.sql) to tests.
func SQLiteClaimSQL(table string) (string, bool) {
	ex, ok := executorFor(sqliteDriver{}, table)
	if !ok {
		return "", false
	}
	return ex.(*sqliteExecutor).q.claim, true
}

// executorFor renders d's statements for table, without a database.
func executorFor(d driver, table string) (executor, bool) {
	t, err := ParseTableName(table)
	if err != nil {
		return nil, false
	}
	ex, err := d.executor(&DB{driver: d}, t)
	return ex, err == nil
}

// MessageHeaderBytes exposes messageHeaderBytes to tests.
func MessageHeaderBytes(h map[string][]string) int64 { return messageHeaderBytes(h) }

// RelayHeaderMinBytes exposes relayHeaderMinBytes to tests.
var RelayHeaderMinBytes = relayHeaderMinBytes

// signalTimeout is how long Signal.Wait waits.
const signalTimeout = 10 * time.Second

// Signal is a test signal of a Subscriber (testsignal.go) as tests see it.
type Signal[T any] struct{ s *testSignal[T] }

// Wait returns the next value signalled, failing the test when none comes
// within signalTimeout.
func (s Signal[T]) Wait(t testing.TB) T {
	t.Helper()
	timer := time.NewTimer(signalTimeout)
	defer timer.Stop()
	select {
	case v := <-s.s.ch:
		return v
	case <-timer.C:
		t.Fatalf("no signal within %s", signalTimeout)
		panic("unreachable")
	}
}

// Clear drops the values signalled so far.
func (s Signal[T]) Clear() {
	for {
		select {
		case <-s.s.ch:
		default:
			return
		}
	}
}

// RequireNone fails the test when a value was signalled.
func (s Signal[T]) RequireNone(t testing.TB, msgAndArgs ...any) {
	t.Helper()
	select {
	case v := <-s.s.ch:
		require.Fail(t, fmt.Sprintf("signalled %v", v), msgAndArgs...)
	default:
	}
}

// RescueSignal enables the signal of sub's rescuer: the rows each run of
// in-flight recovery moved. Call it before Subscribe.
func RescueSignal(sub *Subscriber) Signal[int] {
	sub.rescuer.rescued.init()
	return Signal[int]{&sub.rescuer.rescued}
}

// ClaimSignal enables the signal of sub's claims: the rows each claim
// took. Call it before Subscribe.
func ClaimSignal(sub *Subscriber) Signal[int] {
	sub.claimer.claimed.init()
	return Signal[int]{&sub.claimer.claimed}
}

// DrainSignal enables the signal of sub's drain: it began. Call it before
// Subscribe.
func DrainSignal(sub *Subscriber) Signal[struct{}] {
	sub.draining.init()
	return Signal[struct{}]{&sub.draining}
}

// ManualDrain makes sub's drain give up when expire is called instead of
// after DrainTimeout. Call it before Subscribe.
func ManualDrain(sub *Subscriber) (expire func()) {
	ch := make(chan time.Time)
	sub.drainExpiry = ch
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}
