package bridge_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/health"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/source/postgreswal"
)

// publish adds tenant i's table to the publication and makes the slot
// when missing, as bridge migrate does with source: postgres-wal.
func (tn *tenants) publish(t *testing.T, names postgreswal.Names, i int) {
	t.Helper()
	names.Table = tn.table(i)
	_, err := postgreswal.Repair(context.Background(), tn.db.SQL, names)
	require.NoError(t, err)
	_, _, err = postgreswal.Setup(context.Background(), tn.db.SQL, names)
	require.NoError(t, err)
}

// produce commits rows rows (keys from on) into each of the tenants in tenants, in
// transactions that each write one row into two of them (i, i+1 of the
// list), keys order-NN (the same in every tenant) in ordering keys k0 and
// k1 in turn, subject events.<schema>.
func (tn *tenants) produce(t *testing.T, tenants []int, from, rows int) error {
	for j := from; j < from+rows; j++ {
		for k := 0; k < len(tenants); k += 2 {
			tx, err := tn.db.SQL.Begin()
			if err != nil {
				return err
			}
			for _, i := range tenants[k:min(k+2, len(tenants))] {
				if _, err := tx.Exec("INSERT INTO "+tn.table(i)+" (idempotency_key, subject, payload, ordering_key) VALUES ($1, $2, $3, $4)",
					fmt.Sprintf("order-%02d", j), "events."+tn.schema(i), []byte("x"), fmt.Sprintf("k%d", j%2)); err != nil {
					_ = tx.Rollback()
					return err
				}
			}
			if err := tx.Commit(); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestOneRelayOverManyTablesFromTheWAL: source postgres-wal over the
// pattern of 20 tenant schemas, on one replication slot and one
// publication that lists their tables (each added as bridge migrate does).
// Four producers commit transactions that each write into two tenants'
// tables, with idempotency keys that repeat in every tenant
// (dedup.namespace '{schema}'): every row is in the stream once, each
// table's rows of a key in commit order, every row marked done in its own
// table, and the slot's confirmed position passes the last commit (no
// table holds it). A table the pattern matches that the publication
// leaves out makes readiness degraded, naming it with the fix; once it
// is added its earlier rows are published by the sweep, its later ones
// from the slot. A tenant created while the relay runs is relayed after
// the next refresh, the rows committed before it joined included. Each
// table's metrics carry its name.
func TestOneRelayOverManyTablesFromTheWAL(t *testing.T) {
	t.Parallel()
	const count, rows = 20, 30
	tn := newTenants(t, "postgres-logical", count+1)
	slot, pub := bridgetest.WALNames(t, tn.url)
	names := postgreswal.Names{Slot: slot, Publication: pub}
	for i := range count {
		tn.publish(t, names, i)
	}
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	cfg := tn.config(t, n)
	cfg.Source = config.SourcePostgresWAL
	cfg.WAL.Slot, cfg.WAL.Publication = slot, pub
	cfg.WAL.SweepInterval = time.Hour // the sweep runs when a table joins, not by the clock
	cfg.Dedup.Namespace = "{schema}"
	require.NoError(t, cfg.Validate())
	logger := slog.New(slog.DiscardHandler)
	hs, err := health.Listen(cfg.HTTP.Listen, logger)
	require.NoError(t, err)
	relay, cleanup, err := bridge.NewRelay(context.Background(), cfg, logger, hs)
	require.NoError(t, err)
	group := relay.Source.(*postgreswal.GroupSource).Group
	group.Refreshed = source.NewTestSignal[[]string]()
	moved := source.NewTestSignal[int]()
	bridge.Moved(relay, moved)
	runRelay(t, relay, cleanup)
	require.Len(t, group.Refreshed.Wait(t), count+1)

	// Tenant count is matched and not in the publication yet.
	outside := tn.table(count)
	require.NoError(t, tn.produce(t, []int{count}, 0, 5))
	bridgetest.WaitFor(t, 30*time.Second, func() bool {
		err := group.Ready(context.Background())
		return err != nil && health.IsDegraded(err) && strings.Contains(err.Error(), outside) && strings.Contains(err.Error(), "bridge migrate")
	}, "readiness degraded, naming the table the publication leaves out")

	var g errgroup.Group
	perm := rand.Perm(count)
	for p := range 4 {
		g.Go(func() error { return tn.produce(t, perm[p*count/4:(p+1)*count/4], 0, rows) })
	}
	require.NoError(t, g.Wait())
	tn.publish(t, names, count)
	require.NoError(t, tn.produce(t, []int{count}, 5, 10))
	// Tenant count+1, created while the relay runs, with rows before it
	// is matched and after.
	require.NoError(t, tn.add(t, count+1))
	tn.publish(t, names, count+1)
	require.NoError(t, tn.produce(t, []int{count + 1}, 0, 3))
	group.Refreshed.WaitUntilWithin(t, time.Minute, func() bool { return len(group.Tables()) == count+2 }, "the new tenant relayed")
	require.NoError(t, tn.produce(t, []int{count + 1}, 3, 4))
	var end string
	require.NoError(t, tn.db.SQL.QueryRow("SELECT pg_current_wal_lsn()::text").Scan(&end))

	total := count*rows + 5 + 10 + 3 + 4
	bridgetest.WaitMessages(t, js, "EVENTS", total, 90*time.Second)
	msgs := bridgetest.Messages(t, js, "EVENTS")
	require.Len(t, msgs, total)
	seen := map[string]bool{}
	last := map[string]int64{} // subject/ordering key → last row id
	for _, m := range msgs {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		require.False(t, seen[id], "%s twice", id)
		seen[id] = true
		schema, key, ok := strings.Cut(id, "/")
		require.True(t, ok, "Nats-Msg-Id %q: <schema>/<key>", id)
		require.Equal(t, "events."+schema, m.Subject())
		row, err := strconv.ParseInt(m.Headers().Get(outbox.HeaderID), 10, 64)
		require.NoError(t, err)
		j, err := strconv.Atoi(strings.TrimPrefix(key, "order-"))
		require.NoError(t, err)
		k := fmt.Sprintf("%s/k%d", m.Subject(), j%2)
		if schema < tn.schema(count) { // the late tenants' first rows come by the sweep, not in commit order
			require.Greater(t, row, last[k], "%s: row %d after %d", k, row, last[k])
		}
		last[k] = row
	}
	moved.WaitUntil(t, func() bool { return bridge.Observe(relay).Relayed == int64(total) }, "every row marked relayed")
	for i := range count + 2 {
		var pending int
		require.NoError(t, tn.db.SQL.QueryRow("SELECT count(*) FROM "+tn.table(i)+" WHERE status <> 'done'").Scan(&pending))
		require.Zero(t, pending, "%s: rows not done", tn.table(i))
	}
	want, err := pglogrepl.ParseLSN(end)
	require.NoError(t, err)
	bridgetest.WaitFor(t, 30*time.Second, func() bool {
		var confirmed sql.NullString
		if err := tn.db.SQL.QueryRow("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&confirmed); err != nil || !confirmed.Valid {
			return false
		}
		lsn, err := pglogrepl.ParseLSN(confirmed.String)
		return err == nil && lsn >= want
	}, "the slot confirmed past the last commit")

	relayed := relayedByTable(t, relay)
	require.Len(t, relayed, count+2)
	require.Equal(t, 15.0, relayed[outside])
	require.Equal(t, 7.0, relayed[tn.table(count+1)])
	bridgetest.WaitFor(t, 30*time.Second, func() bool { return group.Ready(context.Background()) == nil }, "ready: every table published")
}

// relayedByTable reads bridge_rows_relayed_total of each table from the
// relay's metrics.
func relayedByTable(t *testing.T, relay *bridge.Relay) map[string]float64 {
	t.Helper()
	families, err := relay.Probes.Gatherer.Gather()
	require.NoError(t, err)
	relayed := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "bridge_rows_relayed_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" {
					relayed[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return relayed
}

// TestADroppedTableLeavesTheSlotToTheOthers: one relay (postgres-wal) over
// two tenants; one gets a backlog of 20,000 rows and is dropped while they
// are relayed. The table is let go, and what its rows held of the shared
// in-flight budget is given back: the other tenant's rows written after
// are relayed. (Before, the rows left in the dropped table's window kept
// the budget, and the reader, waiting for room, stopped reading the slot
// for every table: found by a saboteur.)
func TestADroppedTableLeavesTheSlotToTheOthers(t *testing.T) {
	t.Parallel()
	tn, relay, group, js := twoWALTenants(t)

	tn.exec(t, "INSERT INTO "+tn.table(0)+" (idempotency_key, subject, payload) SELECT 'bulk-' || g, 'events."+tn.schema(0)+"', 'x' FROM generate_series(1, 20000) g")
	bridgetest.WaitFor(t, 60*time.Second, func() bool { return bridge.Observe(relay).Relayed > 500 }, "the backlog being relayed")
	tn.drop(t, 0)
	group.Refreshed.WaitUntilWithin(t, time.Minute, func() bool { return len(group.Tables()) == 1 }, "the dropped table let go")
	info, err := js.Stream(context.Background(), "EVENTS")
	require.NoError(t, err)
	before := int(info.CachedInfo().State.Msgs)
	require.NoError(t, tn.produce(t, []int{1}, 0, 20))
	bridgetest.WaitMessages(t, js, "EVENTS", before+20, 30*time.Second)
}

// TestAStreamlessTenantLeavesTheSlotToTheOthers: one relay (postgres-wal)
// over two tenants sharing the slot and relay.max_in_flight of 100; one
// tenant writes 500 rows to a subject no stream captures. Its rows fail
// and wait, and the other tenant's rows written after are relayed
// meanwhile: what one tenant's rows hold of the reader's budget does not
// stop the slot for the others.
func TestAStreamlessTenantLeavesTheSlotToTheOthers(t *testing.T) {
	t.Parallel()
	tn, _, _, js := twoWALTenants(t)

	tn.exec(t, "INSERT INTO "+tn.table(0)+" (idempotency_key, subject, payload) SELECT 'lost-' || g, 'nostream."+tn.schema(0)+"', 'x' FROM generate_series(1, 500) g")
	require.NoError(t, tn.produce(t, []int{1}, 0, 20))
	bridgetest.WaitMessages(t, js, "EVENTS", 20, 30*time.Second)
}

// twoWALTenants runs a relay (postgres-wal, one slot and publication,
// relay.max_in_flight 100, dedup.namespace '{schema}') over two tenants
// until the test ends, once it relays both.
func twoWALTenants(t *testing.T) (*tenants, *bridge.Relay, *postgreswal.Group, jetstream.JetStream) {
	t.Helper()
	tn := newTenants(t, "postgres-logical", 2)
	slot, pub := bridgetest.WALNames(t, tn.url)
	names := postgreswal.Names{Slot: slot, Publication: pub}
	tn.publish(t, names, 0)
	tn.publish(t, names, 1)
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	cfg := tn.config(t, n)
	cfg.Source = config.SourcePostgresWAL
	cfg.WAL.Slot, cfg.WAL.Publication = slot, pub
	cfg.Dedup.Namespace = "{schema}"
	cfg.Relay.MaxInFlight = 100
	require.NoError(t, cfg.Validate())
	relay, cleanup := newRelay(t, cfg)
	group := relay.Source.(*postgreswal.GroupSource).Group
	group.Refreshed = source.NewTestSignal[[]string]()
	runRelay(t, relay, cleanup)
	require.Len(t, group.Refreshed.Wait(t), 2)
	return tn, relay, group, js
}
