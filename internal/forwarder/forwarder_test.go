package forwarder_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/forwarder"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/sink"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/source/table"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql keeps a connection opener per pool until Close;
		// pgx and modernc have package-level workers.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	)
}

// bundle is one outbox table and one NATS server with stream EVENTS on
// events.>.
type bundle struct {
	db    *outbox.DB // the relay's connection
	store *outbox.Store
	prod  *sql.DB // producers' own connection
	nats  *bridgetest.NATS
	js    jetstream.JetStream
	// marks is signalled by every relay of the bundle after each write of
	// its marks (table.Signals.Marked): what the table holds moves then.
	marks *source.TestSignal[int]
	// claims is signalled by every relay of the bundle after each claim
	// (table.Signals.Claimed).
	claims *source.TestSignal[int]
	// publishTimeout, when set, is the relays' sink.Config.PublishTimeout.
	publishTimeout time.Duration
}

func setup(t *testing.T, kind string) *bundle {
	t.Helper()
	url, _, store := bridgetest.Outbox(t, kind)
	prod, err := outbox.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { prod.Close() })

	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	bridgetest.CreateStream(t, js, "EVENTS", "events.>")
	return &bundle{db: store.DB(), store: store, prod: prod.SQL, nats: n, js: js, marks: source.NewTestSignal[int](), claims: source.NewTestSignal[int]()}
}

type relay struct {
	sub  *table.Subscriber
	stop func()
}

// startRelay runs a relay over b until the test ends or stop is called;
// options adjust the subscriber's configuration.
func (b *bundle) startRelay(t *testing.T, owner string, options ...func(*table.SubscriberConfig)) *relay {
	t.Helper()
	return b.startRelayWith(t, owner, nil, options...)
}

// startRelayWith is startRelay whose forwarder's configuration fwdOption,
// when set, adjusts.
func (b *bundle) startRelayWith(t *testing.T, owner string, fwdOption func(*forwarder.Config), options ...func(*table.SubscriberConfig)) *relay {
	t.Helper()
	logger := testLogger()
	cfg := table.SubscriberConfig{
		Owner: owner, BatchSize: 200, MaxInFlight: 500, PollInterval: 20 * time.Millisecond,
		BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		DrainTimeout: 5 * time.Second,
	}
	for _, o := range options {
		o(&cfg)
	}
	sub, err := table.NewSubscriber(b.store, logger, cfg)
	require.NoError(t, err)
	sub.Signals.Marked, sub.Signals.Claimed = b.marks, b.claims
	nc, err := nats.Connect(b.nats.URL(), nats.MaxReconnects(-1))
	require.NoError(t, err)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second), jetstream.WithPublishAsyncMaxPending(1000))
	require.NoError(t, err)
	pub, err := sink.New(js, sink.Config{Marshaler: forwarder.NewPublisherMarshaler(), PublishTimeout: b.publishTimeout})
	require.NoError(t, err)
	fcfg := forwarder.Config{CloseTimeout: 10 * time.Second, Connected: nc.IsConnected}
	if fwdOption != nil {
		fwdOption(&fcfg)
	}
	fwd, err := forwarder.New(sub, b.store.Table(), pub, logger, fcfg)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fwd.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
			nc.Close()
		})
	}
	t.Cleanup(stop)
	return &relay{sub: sub, stop: stop}
}

func testLogger() *slog.Logger {
	if testing.Verbose() && os.Getenv("BRIDGE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// insertSQL is the plain INSERT a producer in any language runs.
func (b *bundle) insertSQL() string {
	q := "INSERT INTO " + b.store.Table() + " (idempotency_key, subject, payload, headers, ordering_key) VALUES (?, ?, ?, ?, ?)"
	if b.db.Dialect() == "postgres" {
		q = "INSERT INTO " + b.store.Table() + " (idempotency_key, subject, payload, headers, ordering_key) VALUES ($1, $2, $3, $4, $5)"
	}
	return q
}

type produced struct {
	key, subject string
	payload      []byte
	headers      map[string][]string
	orderingKey  string
}

// produce runs producers goroutines, each committing perProducer rows in
// transactions of perTx, one transaction after another; row(p, i, n) makes
// producer p's i-th row, n = p*perProducer + i. Each ordering key must
// belong to one producer: that is what makes a per-key order (docs/DESIGN.md, "The
// life of a row", Ordering). It returns the rows by Nats-Msg-Id.
func (b *bundle) produce(t *testing.T, producers, perProducer, perTx int, row func(p, i, n int) produced) map[string]produced {
	t.Helper()
	var mu sync.Mutex
	want := map[string]produced{}
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for start := 0; start < perProducer; start += perTx {
				var rows []produced
				for i := start; i < start+perTx; i++ {
					rows = append(rows, row(p, i, p*perProducer+i))
				}
				b.commit(t, rows)
				mu.Lock()
				for _, r := range rows {
					want[outbox.MsgID("", r.key)] = r
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return want
}

// commit writes rows in one producer transaction with the plain INSERT.
func (b *bundle) commit(t *testing.T, rows []produced) {
	t.Helper()
	tx, err := b.prod.Begin()
	require.NoError(t, err)
	for _, r := range rows {
		hdr, err := json.Marshal(r.headers)
		require.NoError(t, err)
		var ok sql.NullString
		if r.orderingKey != "" {
			ok = sql.NullString{String: r.orderingKey, Valid: true}
		}
		_, err = tx.Exec(b.insertSQL(), r.key, r.subject, r.payload, string(hdr), ok)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
}

// waitDone waits until n rows are done. The bound is generous: SQLite
// (C translated to Go) runs many times slower under the race detector.
func (b *bundle) waitDone(t *testing.T, n int64) {
	t.Helper()
	b.untilMarked(t, 300*time.Second, func() bool { return b.rows(t, outbox.StatusDone) == n }, n, " rows done")
}

// untilMarked returns once cond holds, asking it after each write of marks
// by a relay of b, failing after d.
func (b *bundle) untilMarked(t *testing.T, d time.Duration, cond func() bool, what ...any) {
	t.Helper()
	b.marks.WaitUntilWithin(t, d, cond, what...)
}

// rows counts the rows of b's table in status.
func (b *bundle) rows(t *testing.T, status outbox.Status) int64 {
	t.Helper()
	st, err := b.store.Stats(context.Background(), 0)
	require.NoError(t, err)
	return st.Rows[status]
}

func payloadFor(i int) []byte {
	switch i % 7 {
	case 0:
		return []byte{}
	case 1:
		b := make([]byte, 64)
		_, _ = rand.Read(b)
		return b
	case 2:
		return []byte("nul\x00in\x00the\x00middle")
	case 3:
		return []byte("invalid utf-8: \xff\xfe\xc3\x28")
	default:
		return []byte(fmt.Sprintf(`{"order":%d}`, i))
	}
}

func TestRelayDeliversEveryRowOnce(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			const producers, perTx = 8, 25
			perProducer := 1250
			if kind == "sqlite" && bridgetest.Race {
				perProducer = 250 // 10,000 rows took 100 s with -race
			}
			bigRow := producers * perProducer / 2 // a 256 KiB payload and a key with spaces
			big := bytes.Repeat([]byte{0xAB, 0x00, 'x'}, 256*1024/3+1)[:256*1024]

			relay := b.startRelay(t, "relay-1")
			want := b.produce(t, producers, perProducer, perTx, func(p, i, n int) produced {
				r := produced{
					key:     fmt.Sprintf("p%d-%d", p, i),
					subject: fmt.Sprintf("events.p%d", p),
					payload: payloadFor(n),
					headers: map[string][]string{"X-Row": {strconv.Itoa(n)}, "X-Multi": {"a", "b"}},
				}
				if n == bigRow {
					r.payload = big
					r.key = "key with spaces and ünïcode " + strconv.Itoa(n)
				}
				if i%4 == 0 {
					r.orderingKey = fmt.Sprintf("p%d-order-%d", p, n%10)
				}
				return r
			})
			total := producers * perProducer
			b.waitDone(t, int64(total))
			relay.stop()

			msgs := bridgetest.Messages(t, b.js, "EVENTS")
			require.Len(t, msgs, total)
			seen := map[string]bool{}
			lastIDPerKey := map[string]int64{}
			seqOfRow := map[int64]uint64{}
			for _, m := range msgs {
				id := m.Headers().Get(jetstream.MsgIDHeader)
				require.False(t, seen[id], "message %s twice", id)
				seen[id] = true
				r, ok := want[id]
				require.True(t, ok, "unexpected Nats-Msg-Id %q", id)
				require.Equal(t, r.subject, m.Subject())
				require.True(t, bytes.Equal(r.payload, m.Data()), "payload of %s differs", r.key)
				require.Equal(t, r.key, m.Headers().Get("Outbox-Idempotency-Key"))
				require.Equal(t, r.headers["X-Row"], m.Headers()["X-Row"])
				require.Equal(t, []string{"a", "b"}, m.Headers()["X-Multi"])
				require.Equal(t, "1", m.Headers().Get("Outbox-Attempt"))
				_, err := time.Parse(time.RFC3339Nano, m.Headers().Get("Outbox-Created-At"))
				require.NoError(t, err)
				rowID, err := strconv.ParseInt(m.Headers().Get("Outbox-Id"), 10, 64)
				require.NoError(t, err)
				meta, err := m.Metadata()
				require.NoError(t, err)
				seqOfRow[rowID] = meta.Sequence.Stream
				if r.orderingKey != "" {
					require.Greater(t, rowID, lastIDPerKey[r.orderingKey], "ordering key %s out of order", r.orderingKey)
					lastIDPerKey[r.orderingKey] = rowID
				}
			}

			rows, err := b.db.SQL.Query("SELECT id, status, relayed_at IS NOT NULL, stream, stream_seq FROM " + b.store.Table())
			require.NoError(t, err)
			defer rows.Close()
			var count int
			for rows.Next() {
				var id, seq int64
				var status, stream string
				var relayed bool
				require.NoError(t, rows.Scan(&id, &status, &relayed, &stream, &seq))
				require.Equal(t, "done", status)
				require.True(t, relayed)
				require.Equal(t, "EVENTS", stream)
				require.Equal(t, seqOfRow[id], uint64(seq), "stream_seq of row %d", id)
				count++
			}
			require.NoError(t, rows.Err())
			require.Equal(t, total, count)
		})
	}
}
