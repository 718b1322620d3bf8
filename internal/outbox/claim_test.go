package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// keyLog records, per ordering key, the claims and settlements of its rows
// in the order the claimers saw them. A claim is logged after Claim
// returned (after its commit); a settlement before its mark is written
// (before its commit). So for a correct claim, the settlement of a key's
// row is always logged before the claim of the key's next row.
type keyLog struct {
	mu     sync.Mutex
	events map[string][]keyEvent
}

type keyEvent struct {
	claim bool
	id    int64
	owner string
	// for settlements: the row goes on (done, dead) or stays first (failed)
	final bool
}

func (l *keyLog) add(key string, e keyEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events[key] = append(l.events[key], e)
}

// check verifies one key's history: claims and settlements alternate, a
// row that failed is claimed again before any later row, and rows are
// claimed in id order.
func (l *keyLog) check(t *testing.T, key string, ids []int64) {
	t.Helper()
	var last keyEvent
	next := 0 // index in ids of the row that must be claimed next
	for i, e := range l.events[key] {
		if e.claim {
			require.True(t, i == 0 || !last.claim, "key %s: row %d claimed by %s while row %d (claimed by %s) was not settled", key, e.id, e.owner, last.id, last.owner)
			require.Less(t, next, len(ids), "key %s: row %d claimed after the last row", key, e.id)
			require.Equal(t, ids[next], e.id, "key %s: claimed out of id order", key)
		} else {
			require.True(t, last.claim && last.id == e.id, "key %s: settlement of row %d does not follow its claim", key, e.id)
			if e.final {
				next++
			}
		}
		last = e
	}
	require.Equal(t, len(ids), next, "key %s: every row settled", key)
}

// Several relays claim from one table at once while producers write it;
// rows fail now and then. Per ordering key, never two rows in flight and
// never a later row before an earlier unsettled one.
func TestConcurrentClaimsKeepPerKeyOrder(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, kind)
			const keys, perKey, free, claimers = 6, 150, 200, 4

			var producers sync.WaitGroup
			idsOfKey := make([][]int64, keys)
			for k := range keys {
				producers.Go(func() {
					// One producer per key, one row per transaction: the
					// order of commits is the order of ids.
					for i := range perKey {
						idsOfKey[k] = append(idsOfKey[k], enqueue(t, s, fmt.Sprintf("k%d-%d", k, i), fmt.Sprintf("key-%d", k)))
					}
				})
			}
			producers.Go(func() {
				for i := range free {
					enqueue(t, s, fmt.Sprintf("free-%d", i), "")
				}
			})
			total := int64(keys*perKey + free)

			log := &keyLog{events: map[string][]keyEvent{}}
			var settled atomic.Int64
			var wg sync.WaitGroup
			stop := make(chan struct{})
			// The claimers stop when every row is settled, or when none has
			// been for a long while (a bug): never because the machine is
			// slow (SQLite's one connection under a loaded -race run took
			// longer than a fixed 90 s in all).
			var progress atomic.Int64
			progress.Store(time.Now().UnixNano())
			stalled := func() bool { return time.Since(time.Unix(0, progress.Load())) > 2*time.Minute }
			for c := range claimers {
				owner := fmt.Sprintf("relay-%d", c)
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(c), 7))
					for settled.Load() < total && !stalled() {
						rows, err := s.Claim(ctx, owner, 1+rng.IntN(15))
						if !assertNoError(t, err) {
							return
						}
						for _, r := range rows {
							if r.OrderingKey.Valid {
								log.add(r.OrderingKey.String, keyEvent{claim: true, id: r.ID, owner: owner})
							}
						}
						time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
						var done []outbox.Done
						var failed []outbox.Failure
						for _, r := range rows {
							switch p := rng.IntN(100); {
							case p < 10: // retryable: stays first of its key
								failed = append(failed, outbox.Failure{ID: r.ID, Attempt: r.Attempt, Err: "try again"})
							case p < 13: // dead letter: no longer blocks its key
								failed = append(failed, outbox.Failure{ID: r.ID, Attempt: r.Attempt, Err: "poison", Permanent: true})
							default:
								done = append(done, outbox.Done{ID: r.ID, Attempt: r.Attempt, Stream: "S", Seq: uint64(r.ID)})
							}
						}
						for _, d := range done {
							if r := rowByID(rows, d.ID); r.OrderingKey.Valid {
								log.add(r.OrderingKey.String, keyEvent{id: d.ID, owner: owner, final: true})
							}
						}
						for _, f := range failed {
							if r := rowByID(rows, f.ID); r.OrderingKey.Valid {
								log.add(r.OrderingKey.String, keyEvent{id: f.ID, owner: owner, final: f.Permanent})
							}
						}
						n, err := s.MarkDone(ctx, owner, done, false)
						if !assertNoError(t, err) {
							return
						}
						m, err := s.MarkFailed(ctx, owner, failed)
						if !assertNoError(t, err) {
							return
						}
						if !assertEqual(t, int64(len(rows)), n+m) {
							return
						}
						settled.Add(n)
						for _, f := range failed {
							if f.Permanent {
								settled.Add(1)
							}
						}
						if len(rows) > 0 {
							progress.Store(time.Now().UnixNano())
						}
					}
				})
			}
			// Watch the table: per key, at most one row in flight.
			var watchErr error
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				q := "SELECT ordering_key, COUNT(*) FROM " + s.Table() + " WHERE status = 'in_flight' AND ordering_key IS NOT NULL GROUP BY ordering_key HAVING COUNT(*) > 1"
				for {
					select {
					case <-stop:
						return
					default:
					}
					var key string
					var n int
					err := s.DB().SQL.QueryRow(q).Scan(&key, &n)
					if err == nil {
						watchErr = fmt.Errorf("key %s has %d rows in flight", key, n)
						return
					}
					if err != sql.ErrNoRows {
						watchErr = err
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
			producers.Wait()
			wg.Wait()
			close(stop)
			<-watched
			require.NoError(t, watchErr)
			require.Equal(t, total, settled.Load(), "every row settled: no row was claimed for 2 minutes")

			st, err := s.Stats(ctx, 0)
			require.NoError(t, err)
			require.Equal(t, total, st.Rows[outbox.StatusDone]+st.Rows[outbox.StatusPermanentFailed])
			for k := range keys {
				log.check(t, fmt.Sprintf("key-%d", k), idsOfKey[k])
			}
		})
	}
}

func rowByID(rows []outbox.Row, id int64) outbox.Row {
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	return outbox.Row{}
}

// assertNoError and assertEqual report from a goroutine other than the
// test's (require would call FailNow there).
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func assertEqual(t *testing.T, want, got int64) bool {
	t.Helper()
	if want != got {
		t.Errorf("marks changed %d rows, want %d: a claimed row was not held by its claimer", got, want)
		return false
	}
	return true
}
