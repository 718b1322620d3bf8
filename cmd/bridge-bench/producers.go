package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// producerVariant is one kind of outbox table the producers phase writes
// to.
type producerVariant string

const (
	// variantMinimal is the smallest outbox table a service could keep: a
	// primary key and a unique idempotency key, no other index.
	variantMinimal producerVariant = "minimal"
	// variantBridge is the table `bridge migrate` makes.
	variantBridge producerVariant = "bridge"
	// variantNotify is the bridge's table with the opt-in NOTIFY trigger
	// (outbox.NotifyTriggerSQL; PostgreSQL only).
	variantNotify producerVariant = "bridge+notify"
	// variantColumns is the bridge's table with its columns, defaults and
	// constraints but only the indexes of the minimal table (primary key,
	// idempotency key): what the row itself costs. An experiment, not a
	// layout a relay can run on.
	variantColumns producerVariant = "bridge-columns"
	// variantNoClaimIndex is the bridge's table without the index its
	// claim reads rows without an ordering key from: PostgreSQL's
	// <table>_unordered_idx, MySQL's claimable_idx (from which its claim
	// reads keyed rows too). What that index costs the producers. An
	// experiment, not a layout a relay can run on.
	variantNoClaimIndex producerVariant = "bridge-no-claim-index"
)

// producerVariants are the variants --producers-variants accepts, and
// whether each runs on PostgreSQL only.
var producerVariants = []struct {
	v            producerVariant
	postgresOnly bool
}{{variantMinimal, false}, {variantBridge, false}, {variantNotify, true}, {variantColumns, false}, {variantNoClaimIndex, false}}

// parseProducerVariants reads --producers-variants: variant names,
// comma-separated, minimal among them (the ratios are to it).
func parseProducerVariants(list string) ([]producerVariant, error) {
	var names []string
	for _, k := range producerVariants {
		names = append(names, string(k.v))
	}
	var out []producerVariant
	for _, name := range strings.Split(list, ",") {
		v := producerVariant(strings.TrimSpace(name))
		if !slices.Contains(names, string(v)) {
			return nil, fmt.Errorf("--producers-variants %q: unknown table kind %q; accepted: %s", list, v, strings.Join(names, ", "))
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if !slices.Contains(out, variantMinimal) {
		return nil, fmt.Errorf("--producers-variants %q: must include minimal, the table every ratio is to", list)
	}
	return out, nil
}

// producerRun is one run of the producers phase: writers sessions
// committing as fast as they can for the phase's duration, each
// transaction an order row and an outbox row.
type producerRun struct {
	Variant string  `json:"variant"`
	Writers int     `json:"writers"`
	Round   int     `json:"round"`
	TPS     float64 `json:"tps"`
}

// producerSummary is the median of the runs of one variant and writer
// count, and its ratio to the minimal table's median at the same writers.
type producerSummary struct {
	Variant         string     `json:"variant"`
	Writers         int        `json:"writers"`
	TPS             []float64  `json:"tps"`
	MedianTPS       float64    `json:"median_tps"`
	RatioToMinimal  float64    `json:"ratio_to_minimal"`
	RoundRatioRange [2]float64 `json:"round_ratio_range"`
}

// producers measures what the outbox costs the service that writes it:
// the commit rate of --producers-writers sessions (8 and 64 by default),
// each committing transactions of one order row and one outbox row of
// --size bytes, against a minimal outbox table, the bridge's table, and
// (PostgreSQL) the bridge's table with the opt-in NOTIFY trigger. The
// variants run interleaved, --producers-rounds rounds of each, every run
// on fresh tables for --producers-duration; no relay runs. Each summary
// gives the median and its ratio to the minimal table's median, and the
// range of the ratio within each round (runs of one round are seconds
// apart, so the load of the shared machine affects them alike).
func (e *env) producers(ctx context.Context) ([]producerRun, []producerSummary, error) {
	variants := e.s.ProducerVariants
	if variants == nil {
		variants = []producerVariant{variantMinimal, variantBridge}
		if e.db.Dialect() == outbox.DialectPostgres {
			variants = append(variants, variantNotify)
		}
	}
	for _, k := range producerVariants {
		if k.postgresOnly && slices.Contains(variants, k.v) && e.db.Dialect() != outbox.DialectPostgres {
			return nil, nil, fmt.Errorf("the producers phase's %s table is PostgreSQL's only, not %s's", k.v, e.db.Dialect())
		}
	}
	if !e.db.Capabilities().ConcurrentWrites {
		return nil, nil, fmt.Errorf("the producers phase needs a database with concurrent writers (PostgreSQL, MySQL, MariaDB), not %s", e.db.Dialect())
	}
	pool, err := outbox.Open(ctx, e.dbURL)
	if err != nil {
		return nil, nil, err
	}
	defer pool.Close()
	maxWriters := slices.Max(e.s.ProducerWriters)
	pool.SQL.SetMaxOpenConns(maxWriters)
	pool.SQL.SetMaxIdleConns(maxWriters)

	var runs []producerRun
	n := 0
	for round := 1; round <= e.s.ProducerRounds; round++ {
		for _, writers := range e.s.ProducerWriters {
			// Each round starts with another variant, so that none always
			// runs right after a checkpoint or another's vacuum.
			order := append(slices.Clone(variants[(round-1)%len(variants):]), variants[:(round-1)%len(variants)]...)
			for _, v := range order {
				n++
				outboxTable, orders, err := e.producerTables(ctx, v, n)
				if err != nil {
					return nil, nil, fmt.Errorf("tables for %s: %w", v, err)
				}
				tps, err := e.produceFor(ctx, pool, outboxTable, orders, writers)
				if err != nil {
					return nil, nil, fmt.Errorf("%s, %d writers: %w", v, writers, err)
				}
				progress("producers: round %d, %d writers, %s table: %.0f transactions/s", round, writers, v, tps)
				runs = append(runs, producerRun{Variant: string(v), Writers: writers, Round: round, TPS: tps})
				e.dropProducerTables(outboxTable, orders)
			}
		}
	}
	return runs, summarize(runs, variants, e.s.ProducerWriters), nil
}

// summarize turns the runs into one summary per variant and writer count.
func summarize(runs []producerRun, variants []producerVariant, writerCounts []int) []producerSummary {
	var out []producerSummary
	for _, writers := range writerCounts {
		of := func(v producerVariant) []producerRun {
			var rs []producerRun
			for _, r := range runs {
				if r.Variant == string(v) && r.Writers == writers {
					rs = append(rs, r)
				}
			}
			return rs
		}
		minimal := of(variantMinimal)
		minMedian := median(tpsOf(minimal))
		for _, v := range variants {
			rs := of(v)
			s := producerSummary{Variant: string(v), Writers: writers, TPS: tpsOf(rs), MedianTPS: median(tpsOf(rs))}
			if minMedian > 0 {
				s.RatioToMinimal = s.MedianTPS / minMedian
			}
			var ratios []float64
			for i := range min(len(rs), len(minimal)) {
				if minimal[i].TPS > 0 {
					ratios = append(ratios, rs[i].TPS/minimal[i].TPS)
				}
			}
			if len(ratios) > 0 {
				s.RoundRatioRange = [2]float64{slices.Min(ratios), slices.Max(ratios)}
			}
			out = append(out, s)
		}
	}
	return out
}

func tpsOf(rs []producerRun) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = r.TPS
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// producerTables creates run n's outbox table of variant v and its orders
// table, and returns their names.
func (e *env) producerTables(ctx context.Context, v producerVariant, n int) (outboxTable, orders string, err error) {
	phase := "prod" + strconv.Itoa(n)
	mysql := e.db.Dialect() == outbox.DialectMySQL
	orders = "orders_" + phase
	switch {
	case e.schema != "":
		orders = e.schema + "." + orders
	case mysql:
		orders = "bench_" + e.suffix + "_" + orders
		e.tables = append(e.tables, orders)
	}
	ordersDDL := `CREATE TABLE ` + orders + ` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, customer text NOT NULL, amount bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`
	if mysql {
		ordersDDL = `CREATE TABLE ` + orders + ` (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount BIGINT NOT NULL, created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`
	}
	if _, err := e.db.SQL.ExecContext(ctx, ordersDDL); err != nil {
		return "", "", err
	}
	if v == variantMinimal {
		outboxTable = "outbox_" + phase
		ddl := `CREATE TABLE %s (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, idempotency_key text NOT NULL UNIQUE,
			subject text NOT NULL, payload bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`
		switch {
		case e.schema != "":
			outboxTable = e.schema + "." + outboxTable
		case mysql:
			outboxTable = "bench_" + e.suffix + "_" + outboxTable
			e.tables = append(e.tables, outboxTable)
			ddl = `CREATE TABLE %s (id BIGINT AUTO_INCREMENT PRIMARY KEY, idempotency_key VARCHAR(255) NOT NULL UNIQUE,
				subject VARCHAR(255) NOT NULL, payload LONGBLOB NOT NULL, created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`
		}
		_, err := e.db.SQL.ExecContext(ctx, fmt.Sprintf(ddl, outboxTable))
		return outboxTable, orders, err
	}
	store, err := e.plainTable(ctx, phase)
	if err != nil {
		return "", "", err
	}
	if v == variantColumns || v == variantNoClaimIndex {
		if err := e.dropIndexes(ctx, store.Table(), v == variantColumns); err != nil {
			return "", "", fmt.Errorf("drop indexes of %s: %w", store.Table(), err)
		}
	}
	if v == variantNotify {
		trigger, err := outbox.NotifyTriggerSQL(store.Table())
		if err != nil {
			return "", "", err
		}
		if _, err := e.db.SQL.ExecContext(ctx, trigger); err != nil {
			return "", "", err
		}
	}
	return store.Table(), orders, nil
}

// dropIndexes drops indexes of the bridge table: every one but the
// primary key and the unique idempotency key (all), or only the index the
// claim reads rows without an ordering key from.
func (e *env) dropIndexes(ctx context.Context, table string, all bool) error {
	list := `SELECT format('DROP INDEX %I.%I', n.nspname, c.relname) FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE i.indrelid = $1::regclass AND NOT i.indisunique AND ($2 OR c.relname LIKE '%\_unordered\_idx')`
	if e.db.Dialect() == outbox.DialectMySQL {
		list = `SELECT DISTINCT concat('ALTER TABLE ', table_name, ' DROP INDEX ', index_name) FROM information_schema.statistics
			WHERE table_schema = DATABASE() AND table_name = ? AND non_unique = 1 AND (? OR index_name = 'claimable_idx')`
	}
	rows, err := e.db.SQL.QueryContext(ctx, list, table, all)
	if err != nil {
		return err
	}
	var drops []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			rows.Close()
			return err
		}
		drops = append(drops, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(drops) == 0 {
		return fmt.Errorf("no index to drop: the migrations changed the indexes' names")
	}
	for _, d := range drops {
		if _, err := e.db.SQL.ExecContext(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// dropProducerTables drops a run's tables, so that the runs after it do
// not share the server with their rows' vacuum.
func (e *env) dropProducerTables(tables ...string) {
	for _, t := range tables {
		_, _ = e.db.SQL.Exec("DROP TABLE IF EXISTS " + t)
		_, _ = e.db.SQL.Exec("DROP TABLE IF EXISTS " + t + "_migrations")
	}
	if e.db.Dialect() == outbox.DialectPostgres {
		_, _ = e.db.SQL.Exec("CHECKPOINT")
	}
}

// produceFor runs writers sessions committing transactions of one order
// row and one outbox row into the tables for --producers-duration, and
// returns the transactions committed per second.
func (e *env) produceFor(ctx context.Context, pool *outbox.DB, outboxTable, orders string, writers int) (float64, error) {
	insOrder := `INSERT INTO ` + orders + ` (customer, amount) VALUES ($1, $2)`
	insOutbox := `INSERT INTO ` + outboxTable + ` (idempotency_key, subject, payload) VALUES ($1, $2, $3)`
	if pool.Dialect() == outbox.DialectMySQL {
		insOrder, insOutbox = strings.ReplaceAll(strings.ReplaceAll(insOrder, "$1", "?"), "$2", "?"),
			strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(insOutbox, "$1", "?"), "$2", "?"), "$3", "?")
	}
	var committed atomic.Int64
	runCtx, cancel := context.WithTimeout(ctx, e.s.ProducerDuration)
	defer cancel()
	start := time.Now()
	g, gctx := errgroup.WithContext(runCtx)
	for w := range writers {
		g.Go(func() error {
			conn, err := pool.SQL.Conn(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			for i := 0; gctx.Err() == nil; i++ {
				// The transaction itself runs with ctx: one cut short by the
				// deadline would count as an error.
				tx, err := conn.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				key := "w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				if _, err := tx.ExecContext(ctx, insOrder, "c"+strconv.Itoa(w), i); err != nil {
					_ = tx.Rollback()
					return err
				}
				if _, err := tx.ExecContext(ctx, insOutbox, key, "orders.created", e.payload); err != nil {
					_ = tx.Rollback()
					return err
				}
				if err := tx.Commit(); err != nil {
					return err
				}
				committed.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil && ctx.Err() == nil && runCtx.Err() == nil {
		return 0, err
	}
	return float64(committed.Load()) / time.Since(start).Seconds(), nil
}
