package producerrelay_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/producer"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql keeps a connection opener per pool until Close;
		// pgx has package-level workers.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	)
}

// kinds are the databases every write test runs on. SQLite always runs;
// PostgreSQL and MySQL/MariaDB run when BRIDGE_TEST_POSTGRES_URL /
// BRIDGE_TEST_MYSQL_URL are set (always in CI).
var kinds = []string{"sqlite", "postgres", "mysql"}

// bundle is a migrated outbox table, the producers' connection to it and a
// Writer for it.
type bundle struct {
	url   string
	store *outbox.Store // the relay's view of the table
	prod  *sql.DB       // producers' own connection
	w     *producer.Writer
}

func setup(t *testing.T, kind string) *bundle {
	t.Helper()
	url, table, store := bridgetest.Outbox(t, kind)
	prod, err := outbox.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { prod.Close() })
	w, err := producer.New(producer.Config{Table: table, Dialect: producer.Dialect(store.DB().Dialect())})
	require.NoError(t, err)
	return &bundle{url: url, store: store, prod: prod.SQL, w: w}
}

// q rewrites ? placeholders as $1, $2, … for PostgreSQL.
func (b *bundle) q(query string) string {
	if b.w.Dialect() != producer.Postgres {
		return query
	}
	var out strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			out.WriteString("$" + strconv.Itoa(n))
			continue
		}
		out.WriteRune(c)
	}
	return out.String()
}

// write writes events in one committed transaction of the producers'
// connection.
func (b *bundle) write(t *testing.T, events ...producer.Event) []producer.Result {
	t.Helper()
	res, err := b.try(t, events...)
	require.NoError(t, err)
	return res
}

// try writes events in one transaction of the producers' connection,
// committed when Write succeeds and rolled back when it fails.
func (b *bundle) try(t *testing.T, events ...producer.Event) ([]producer.Result, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.prod.BeginTx(ctx, nil)
	require.NoError(t, err)
	res, err := b.w.Write(ctx, tx, events...)
	if err != nil {
		require.NoError(t, tx.Rollback())
		return res, err
	}
	require.NoError(t, tx.Commit())
	return res, nil
}

// count is the number of rows in the table.
func (b *bundle) count(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.prod.QueryRow("SELECT COUNT(*) FROM "+b.w.Table()).Scan(&n))
	return n
}

// storedRow is a row as the table holds it.
type storedRow struct {
	key, subject string
	payload      []byte
	headers      map[string][]string // as the relay decodes them
	orderingKey  sql.NullString
	status       string
}

func (b *bundle) row(t *testing.T, id int64) storedRow {
	t.Helper()
	var r storedRow
	var headers []byte
	require.NoError(t, b.prod.QueryRow(b.q("SELECT idempotency_key, subject, payload, headers, ordering_key, status FROM "+b.w.Table()+" WHERE id = ?"), id).
		Scan(&r.key, &r.subject, &r.payload, &headers, &r.orderingKey, &r.status))
	h, err := outbox.ParseHeaders(headers)
	require.NoError(t, err, "the relay reads the headers column %s", headers)
	r.headers = h
	return r
}
