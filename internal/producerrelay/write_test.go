package producerrelay_test

import (
	"context"
	"database/sql"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/producer"
)

func TestWriteRollbackWritesNothingCommitWritesRows(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			ctx := context.Background()

			tx, err := b.prod.BeginTx(ctx, nil)
			require.NoError(t, err)
			res, err := b.w.Write(ctx, tx, producer.Event{Subject: "events.order.created", Payload: []byte("x"), IdempotencyKey: "rolled-back"})
			require.NoError(t, err)
			require.False(t, res[0].AlreadyEnqueued)
			require.NoError(t, tx.Rollback())
			require.Zero(t, b.count(t), "a rolled-back Write leaves no row")

			events := []producer.Event{
				{
					Subject:        "events.order.created",
					Payload:        []byte(`{"id":42}`),
					Headers:        producer.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b, c"}, "X-Empty": {}},
					OrderingKey:    "order-42",
					IdempotencyKey: "order-42-created",
				},
				{Subject: "events.order.bytes", Payload: []byte("nul\x00and invalid utf-8 \xff\xfe"), IdempotencyKey: "key with spaces and ünïcode"},
				{Subject: "events.order.empty", IdempotencyKey: "nil-payload"},
			}
			res = b.write(t, events...)
			require.Len(t, res, 3)
			require.Equal(t, 3, b.count(t))
			for i, r := range res {
				require.False(t, r.AlreadyEnqueued)
				require.Equal(t, events[i].IdempotencyKey, r.IdempotencyKey)
				if i > 0 {
					require.Greater(t, r.ID, res[i-1].ID, "ids follow the order of the events")
				}
			}

			first := b.row(t, res[0].ID)
			require.Equal(t, "order-42-created", first.key)
			require.Equal(t, "events.order.created", first.subject)
			require.Equal(t, []byte(`{"id":42}`), first.payload)
			require.Equal(t, map[string][]string{"Content-Type": {"application/json"}, "X-Multi": {"a", "b, c"}}, first.headers)
			require.Equal(t, sql.NullString{String: "order-42", Valid: true}, first.orderingKey)
			require.Equal(t, "pending", first.status)

			second := b.row(t, res[1].ID)
			require.Equal(t, "key with spaces and ünïcode", second.key)
			require.Equal(t, []byte("nul\x00and invalid utf-8 \xff\xfe"), second.payload, "payload bytes are stored unchanged")
			require.Nil(t, second.headers)
			require.False(t, second.orderingKey.Valid, "no ordering key is NULL")

			// A nil payload is an empty body: payload is NOT NULL.
			require.Empty(t, b.row(t, res[2].ID).payload)
		})
	}
}

func TestWriteReportsAlreadyEnqueued(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)

			first := b.write(t, producer.Event{Subject: "events.a", Payload: []byte("first"), IdempotencyKey: "k1"})
			require.False(t, first[0].AlreadyEnqueued)
			require.NotZero(t, first[0].ID)

			// A second transaction: the same key again, and a new one.
			again := b.write(t,
				producer.Event{Subject: "events.b", Payload: []byte("second"), IdempotencyKey: "k1"},
				producer.Event{Subject: "events.a", IdempotencyKey: "k2"},
			)
			require.Equal(t, producer.Result{ID: 0, IdempotencyKey: "k1", AlreadyEnqueued: true}, again[0])
			require.False(t, again[1].AlreadyEnqueued)
			require.Greater(t, again[1].ID, first[0].ID)

			// The same key twice in one call: the second is the repeat.
			same := b.write(t,
				producer.Event{Subject: "events.a", IdempotencyKey: "k3"},
				producer.Event{Subject: "events.a", IdempotencyKey: "k3"},
			)
			require.False(t, same[0].AlreadyEnqueued)
			require.True(t, same[1].AlreadyEnqueued)

			require.Equal(t, 3, b.count(t))
			kept := b.row(t, first[0].ID)
			require.Equal(t, "events.a", kept.subject, "the first row is left as it was")
			require.Equal(t, []byte("first"), kept.payload)
		})
	}
}

func TestWriteGeneratesUUIDv7Keys(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			res := b.write(t, producer.Event{Subject: "events.a"}, producer.Event{Subject: "events.a"})
			require.NotEqual(t, res[0].IdempotencyKey, res[1].IdempotencyKey)
			for _, r := range res {
				require.False(t, r.AlreadyEnqueued)
				u, err := uuid.Parse(r.IdempotencyKey)
				require.NoError(t, err)
				require.Equal(t, uuid.Version(7), u.Version())
				require.Equal(t, r.IdempotencyKey, b.row(t, r.ID).key)
			}
		})
	}
}

func TestWriteNoEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	res := b.write(t)
	require.Empty(t, res)
	require.Zero(t, b.count(t))
}

func TestWriteNilTx(t *testing.T) {
	t.Parallel()
	w, err := producer.New(producer.Config{})
	require.NoError(t, err)
	_, err = w.Write(context.Background(), nil, producer.Event{Subject: "events.a"})
	require.ErrorContains(t, err, "tx is nil")
	_, err = w.WritePgx(context.Background(), nil, producer.Event{Subject: "events.a"})
	require.ErrorContains(t, err, "tx is nil")
}

func TestWritePgx(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = b.w.WritePgx(ctx, tx, producer.Event{Subject: "events.pgx", IdempotencyKey: "pgx-rolled-back"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, b.count(t), "a rolled-back WritePgx leaves no row")

	tx, err = conn.Begin(ctx)
	require.NoError(t, err)
	res, err := b.w.WritePgx(ctx, tx,
		producer.Event{
			Subject: "events.pgx", Payload: []byte("p\x00\xff"), IdempotencyKey: "pgx-1",
			Headers: producer.Header{"A": {"1"}, "B": {"2", "3"}}, OrderingKey: "agg-1",
		},
		producer.Event{Subject: "events.pgx"},
	)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Len(t, res, 2)
	require.Equal(t, "pgx-1", res[0].IdempotencyKey)
	require.False(t, res[0].AlreadyEnqueued)
	_, err = uuid.Parse(res[1].IdempotencyKey)
	require.NoError(t, err)

	r := b.row(t, res[0].ID)
	require.Equal(t, []byte("p\x00\xff"), r.payload)
	require.Equal(t, map[string][]string{"A": {"1"}, "B": {"2", "3"}}, r.headers)
	require.Equal(t, "agg-1", r.orderingKey.String)

	tx, err = conn.Begin(ctx)
	require.NoError(t, err)
	res, err = b.w.WritePgx(ctx, tx, producer.Event{Subject: "events.pgx", IdempotencyKey: "pgx-1"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.True(t, res[0].AlreadyEnqueued)
	require.Equal(t, 2, b.count(t))
}

func TestWritePgxNeedsPostgresDialect(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })

	w, err := producer.New(producer.Config{Dialect: producer.MySQL})
	require.NoError(t, err)
	_, err = w.WritePgx(ctx, tx, producer.Event{Subject: "events.a"})
	require.ErrorContains(t, err, `WritePgx needs a Writer of dialect "postgres", this one is "mysql"`)
}

// TestWriteMySQLClientFoundRows writes through a connection of the
// service's own, with clientFoundRows=true (matched rather than changed
// rows are counted): an existing key is still reported, from the insert id.
func TestWriteMySQLClientFoundRows(t *testing.T) {
	t.Parallel()
	b := setup(t, "mysql")
	for _, foundRows := range []bool{false, true} {
		cfg := mysqlConfig(t, b.url)
		cfg.ClientFoundRows = foundRows
		connector, err := mysql.NewConnector(cfg)
		require.NoError(t, err)
		db := sql.OpenDB(connector)
		t.Cleanup(func() { db.Close() })

		key := "found-rows-" + map[bool]string{false: "off", true: "on"}[foundRows]
		for i, want := range []bool{false, true} {
			tx, err := db.Begin()
			require.NoError(t, err)
			res, err := b.w.Write(context.Background(), tx, producer.Event{Subject: "events.a", IdempotencyKey: key})
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
			require.Equal(t, want, res[0].AlreadyEnqueued, "clientFoundRows=%v, write %d", foundRows, i+1)
			require.Equal(t, want, res[0].ID == 0)
		}
	}
	require.Equal(t, 2, b.count(t))
}

func TestWriteMySQLKeyLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, "mysql")
	longest := strings.Repeat("k", 255)
	res := b.write(t, producer.Event{Subject: "events.a", IdempotencyKey: longest, OrderingKey: longest})
	require.Equal(t, longest, b.row(t, res[0].ID).key)

	ctx := context.Background()
	tx, err := b.prod.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	for _, e := range []producer.Event{
		{Subject: "events.a", IdempotencyKey: longest + "k"},
		{Subject: "events.a", OrderingKey: longest + "k"},
	} {
		_, err := b.w.Write(ctx, tx, e)
		require.ErrorIs(t, err, producer.ErrInvalidEvent)
		require.ErrorContains(t, err, "is 256 bytes; this table holds keys of at most 255 bytes")
	}
}

// mysqlConfig is the driver configuration for the test server URL, without
// the session settings the relay's own connections add.
func mysqlConfig(t *testing.T, raw string) *mysql.Config {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr = "tcp", u.Host
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	return cfg
}
