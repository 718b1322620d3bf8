package bridge_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
)

// runDaemon builds the daemon of cfg as wire assembles it (any source) and
// runs it until the test ends.
func runDaemon(t *testing.T, cfg *config.Config, moved *source.TestSignal[int]) {
	t.Helper()
	require.NoError(t, cfg.Validate())
	logger := discardLogger()
	hs := listenHealth(t, cfg.HTTP.Listen)
	d, cleanup, err := bridge.NewDaemon(context.Background(), cfg, logger, hs)
	require.NoError(t, err)
	bridge.Moved(d, moved)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
		cleanup()
	})
}

// postgresSourceConfig is the configuration of a relay of source (table
// or postgres-wal) over a fresh outbox table on the PostgreSQL server with
// wal_level = logical, with the slot and publication of postgres-wal made,
// and a store over that table.
func postgresSourceConfig(t *testing.T, source, natsURL string) (config.Config, *outbox.Store) {
	t.Helper()
	url, table, store := bridgetest.Outbox(t, "postgres-logical")
	cfg := relayConfig(t, url, table, natsURL)
	cfg.Source = source
	if source == config.SourcePostgresWAL {
		cfg.WAL.Slot, cfg.WAL.Publication = bridgetest.WALNames(t, url)
		_, _, err := postgreswal.Setup(context.Background(), store.DB().SQL, postgreswal.Names{Table: table, Slot: cfg.WAL.Slot, Publication: cfg.WAL.Publication})
		require.NoError(t, err)
	}
	return cfg, store
}

func relayConfig(t *testing.T, url, table, natsURL string) config.Config {
	cfg := config.Default()
	cfg.Database.URL, cfg.Database.Table = url, table
	cfg.NATS.URL = natsURL
	cfg.Streams = []config.Stream{{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: time.Minute, Replicas: 1, Storage: "file"}}
	cfg.HTTP.Listen = "127.0.0.1:0"
	return cfg
}

// TestWakeUpWithoutNotifications: on every database, with a poll interval
// far longer than the test and no notification of any kind (the table
// `migrate` makes has no trigger), rows committed one after another are
// relayed within seconds each: the claims follow the rows (adaptive
// polling, docs/DESIGN.md "The wake-up"). On the code before it, MariaDB
// and SQLite waited the poll interval (1 h) for the second row, and the
// PostgreSQL table had the NOTIFY trigger.
func TestWakeUpWithoutNotifications(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url, table, store := bridgetest.Outbox(t, kind)
			if kind == "postgres" {
				var triggers int
				require.NoError(t, store.DB().SQL.QueryRowContext(ctx,
					"SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal", table).Scan(&triggers))
				require.Zero(t, triggers, "migrate leaves the table without a trigger: no NOTIFY in the producers' transactions")
			}
			n := bridgetest.StartNATS(t)
			cfg := relayConfig(t, url, table, n.URL())
			cfg.Relay.PollInterval = time.Hour
			// The first claim takes this row; the claims follow from there.
			_, err := store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "first", Subject: "events.x", Payload: []byte("x")})
			require.NoError(t, err)
			moved := source.NewTestSignal[int]()
			runDaemon(t, &cfg, moved)
			waitDone(t, moved, store, 1)
			for i := range 8 {
				_, err = store.Enqueue(ctx, outbox.Entry{IdempotencyKey: fmt.Sprintf("row-%d", i), Subject: "events.x", Payload: []byte("x")})
				require.NoError(t, err)
				waitDone(t, moved, store, int64(i+2))
			}
		})
	}
}

// TestPrepareTransaction: a producer's transaction that inserts an outbox
// row can be prepared (PREPARE TRANSACTION) on both PostgreSQL sources;
// the rows of COMMIT PREPARED are relayed exactly once, those of ROLLBACK
// PREPARED never. Before, the NOTIFY trigger `migrate` installed made
// PREPARE TRANSACTION fail ("cannot PREPARE a transaction that has
// executed LISTEN, UNLISTEN, or NOTIFY"). Needs max_prepared_transactions
// > 0, which .ci/postgres-logical sets.
func TestPrepareTransaction(t *testing.T) {
	for _, src := range []string{config.SourceTable, config.SourcePostgresWAL} {
		t.Run(src, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			n := bridgetest.StartNATS(t)
			cfg, store := postgresSourceConfig(t, src, n.URL())
			db, table := store.DB(), store.Table()
			moved := source.NewTestSignal[int]()
			runDaemon(t, &cfg, moved)

			gid := func(what string) string { return fmt.Sprintf("%s_%s", table, what) }
			prepare := func(key, what string) {
				conn, err := db.SQL.Conn(ctx)
				require.NoError(t, err)
				defer conn.Close()
				_, err = conn.ExecContext(ctx, "BEGIN")
				require.NoError(t, err)
				_, err = conn.ExecContext(ctx, "INSERT INTO "+table+" (idempotency_key, subject, payload) VALUES ($1, 'events.x', 'x')", key)
				require.NoError(t, err)
				_, err = conn.ExecContext(ctx, "PREPARE TRANSACTION '"+gid(what)+"'")
				require.NoError(t, err, "PREPARE TRANSACTION after an outbox insert")
			}
			prepare("committed", "c")
			prepare("rolled-back", "r")
			_, err := db.SQL.ExecContext(ctx, "ROLLBACK PREPARED '"+gid("r")+"'")
			require.NoError(t, err)
			_, err = db.SQL.ExecContext(ctx, "COMMIT PREPARED '"+gid("c")+"'")
			require.NoError(t, err)
			// A row committed after both: once it is relayed, so is
			// everything committed before it that ever will be.
			_, err = store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "after", Subject: "events.x", Payload: []byte("x")})
			require.NoError(t, err)
			moved.WaitUntilWithin(t, 60*time.Second, func() bool {
				st, err := store.Stats(ctx, 0)
				require.NoError(t, err)
				return st.Rows[outbox.StatusDone] == 2
			}, "the committed prepared row and the row after it relayed")

			_, js := n.JetStream(t)
			ids := map[string]int{}
			for _, m := range bridgetest.Messages(t, js, "EVENTS") {
				ids[m.Headers().Get("Nats-Msg-Id")]++
			}
			require.Len(t, ids, 2, "the committed prepared row and the row after it, nothing of the rolled-back one: %v", ids)
			for id, count := range ids {
				require.Equal(t, 1, count, "message %s stored once", id)
			}
			var rolledBack int
			require.NoError(t, db.SQL.QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE idempotency_key = 'rolled-back'").Scan(&rolledBack))
			require.Zero(t, rolledBack)
		})
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func listenHealth(t *testing.T, addr string) *health.Server {
	t.Helper()
	hs, err := health.Listen(addr, discardLogger())
	require.NoError(t, err)
	return hs
}

// TestUpgradeWhileRelaying: migrations 00004 (the NOTIFY trigger dropped)
// and 00005 (an index dropped CONCURRENTLY) applied while producers write and a relay started on the table as the
// previous version made it (schema 3, the trigger waking its LISTEN) keeps
// running; a relay started after the migration joins it. Every row is in
// the stream exactly once, and the table ends without the trigger. The
// claim and mark statements are those of the previous version (00004
// changes none), so the first relay runs what an old relay runs against
// the table; its LISTEN hears nothing after the migration and it goes on
// by polling.
func TestUpgradeWhileRelaying(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, table := bridgetest.PostgresTable(t)
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = outbox.MigrateTo(ctx, db, table, 3)
	require.NoError(t, err)
	triggers := func() int {
		var n int
		require.NoError(t, db.SQL.QueryRowContext(ctx,
			"SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal", table).Scan(&n))
		return n
	}
	require.Equal(t, 1, triggers(), "schema 3 has the NOTIFY trigger")
	relayAcrossMigration(t, db, url, table)
	require.Zero(t, triggers(), "migration 00004 drops the trigger")
}

// TestMySQLUpgradeWhileRelaying: migration 00002 (the lease and done
// indexes replaced by one on relayed_at, an online ALTER TABLE) applied
// while producers write and a relay started on the table of schema 1
// keeps running; a relay started after it joins. Every row once.
func TestMySQLUpgradeWhileRelaying(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, table := bridgetest.MySQLTable(t)
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = outbox.MigrateTo(ctx, db, table, 1)
	require.NoError(t, err)
	relayAcrossMigration(t, db, url, table)
}

// relayAcrossMigration runs a relay on table as it is, migrates it to the
// newest schema while four producers write 400 rows, starts a second relay
// once every migration is applied, and checks that every row is relayed
// and stored in the stream exactly once.
func relayAcrossMigration(t *testing.T, db *outbox.DB, url, table string) {
	t.Helper()
	ctx := context.Background()
	store, err := outbox.NewStore(db, table)
	require.NoError(t, err)
	n := bridgetest.StartNATS(t)
	old := relayConfig(t, url, table, n.URL())
	old.Relay.Owner = "old"
	moved := source.NewTestSignal[int]() // both relays'
	runDaemon(t, &old, moved)

	const writers, perWriter = 4, 100
	produce := func(from, to int) {
		errs := make(chan error, writers)
		for w := range writers {
			go func() {
				for i := from; i < to; i++ {
					_, err := store.Enqueue(ctx, outbox.Entry{IdempotencyKey: fmt.Sprintf("w%d-%d", w, i), Subject: "events.x", Payload: []byte("x")})
					if err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range writers {
			require.NoError(t, <-errs)
		}
	}
	done, migrated := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		produce(0, perWriter/2)
		// Half written: migrate while the writers go on.
		go func() {
			defer close(migrated)
			_, err := outbox.Migrate(ctx, db, table)
			assert.NoError(t, err, "migrations while producers and a relay run")
		}()
		produce(perWriter/2, perWriter)
	}()
	select {
	case <-migrated:
	case <-time.After(60 * time.Second):
		t.Fatal("the migrations did not finish within 60 s")
	}
	current, target, err := outbox.SchemaVersions(ctx, db, table)
	require.NoError(t, err)
	require.Equal(t, target, current, "every migration applied while producers write")
	neu := relayConfig(t, url, table, n.URL())
	neu.Relay.Owner = "new"
	runDaemon(t, &neu, moved)
	<-done

	moved.WaitUntilWithin(t, 60*time.Second, func() bool {
		st, err := store.Stats(ctx, 0)
		require.NoError(t, err)
		return st.Rows[outbox.StatusDone] == writers*perWriter
	}, "every row relayed")
	_, js := n.JetStream(t)
	ids := map[string]int{}
	for _, m := range bridgetest.Messages(t, js, "EVENTS") {
		ids[m.Headers().Get("Nats-Msg-Id")]++
	}
	require.Len(t, ids, writers*perWriter)
	for id, count := range ids {
		require.Equal(t, 1, count, "message %s stored once", id)
	}
}
