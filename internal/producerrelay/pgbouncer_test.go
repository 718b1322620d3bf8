package producerrelay_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/producer"
)

// The producer writes through a PgBouncer in transaction mode, with
// database/sql and with pgx, when its pool uses the documented setting
// (default_query_exec_mode=cache_describe): every event is stored once, and
// a second write of a key reports AlreadyEnqueued through the pooler too.
func TestProducerThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct, table := bridgetest.PostgresTable(t)
	db, err := outbox.Open(ctx, direct)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = outbox.Migrate(ctx, db, table)
	require.NoError(t, err)
	pooled := bridgetest.StartPgBouncer(t, direct, "transaction", 2)

	w, err := producer.New(producer.Config{Table: table, Dialect: producer.Postgres})
	require.NoError(t, err)
	appURL := pooled + "&default_query_exec_mode=cache_describe"
	app, err := sql.Open("pgx", appURL)
	require.NoError(t, err)
	t.Cleanup(func() { app.Close() })
	events := func(prefix string, tx int) []producer.Event {
		out := make([]producer.Event, 5)
		for i := range out {
			key := fmt.Sprintf("%s-%d-%d", prefix, tx, i)
			out[i] = producer.Event{Subject: "events.pool", Payload: []byte(key), IdempotencyKey: key, OrderingKey: fmt.Sprintf("k%d", i%3)}
		}
		return out
	}
	for i := range 20 {
		tx, err := app.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = w.Write(ctx, tx, events("sql", i)...)
		require.NoError(t, err, "producer.Write through PgBouncer, transaction %d", i)
		require.NoError(t, tx.Commit())
	}
	conn, err := pgx.Connect(ctx, appURL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	for i := range 20 {
		require.NoError(t, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := w.WritePgx(ctx, tx, events("pgx", i)...)
			return err
		}), "producer.WritePgx through PgBouncer, transaction %d", i)
	}

	tx, err := app.BeginTx(ctx, nil)
	require.NoError(t, err)
	res, err := w.Write(ctx, tx, events("sql", 0)...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	for _, r := range res {
		require.True(t, r.AlreadyEnqueued, "key %s written twice through the pooler", r.IdempotencyKey)
	}

	var n int
	require.NoError(t, db.SQL.QueryRow("SELECT count(*) FROM "+table).Scan(&n))
	require.Equal(t, 200, n)
}
