package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrNoProbe is returned by DB.MayClaimEach on a database whose claims do
// not probe first (SQLite: Capabilities.ProbeBeforeClaim is false).
var ErrNoProbe = errors.New("this database has no claim probe")

// MayClaimEach reports, for each of stores (tables of db), whether a claim
// may take a row now, as Store.MayClaim does, asked in one statement: the
// UNION ALL of each table's probe, which answers the positions of the
// tables with a row to claim. A relay over many tables probes its idle
// tables with one query per poll instead of one per table. A table that
// does not exist fails the whole statement (outbox.IsMissingTable).
// Errors: ErrNoProbe; the statement's error, naming the tables' count.
func (db *DB) MayClaimEach(ctx context.Context, stores []*Store) ([]bool, error) {
	out := make([]bool, len(stores))
	if len(stores) == 0 {
		return out, nil
	}
	// A branch per table; MySQL's SELECT with a WHERE needs a FROM.
	branch := "SELECT %d WHERE (%s)"
	if db.Dialect() == DialectMySQL {
		branch = "SELECT %d FROM DUAL WHERE (%s)"
	}
	var b strings.Builder
	var args []any
	for i, s := range stores {
		q, a, ok := s.exec.MayClaimQuery()
		if !ok {
			return nil, ErrNoProbe
		}
		if i > 0 {
			b.WriteString("\nUNION ALL ")
		}
		fmt.Fprintf(&b, branch, i, q)
		args = a
	}
	rows, err := db.SQL.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("look for claimable rows in %d outbox tables: %w", len(stores), err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int
		if err := rows.Scan(&i); err != nil {
			return nil, err
		}
		if i >= 0 && i < len(out) {
			out[i] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look for claimable rows in %d outbox tables: %w", len(stores), err)
	}
	return out, nil
}

// BacklogCap is the most rows DB.BacklogEach counts in one table
// (backlog.sql): the count reads that many index entries at most.
const BacklogCap = 10000

// BacklogEach returns, for each of stores (tables of db), how many rows
// wait to be relayed now (pending, or failed and past their backoff),
// counted up to BacklogCap, asked in one statement (the UNION ALL of each
// table's backlog.sql). A relay over many tables weighs the in-flight
// shares of its tables with a backlog by it (table.Budget). A table that
// does not exist fails the whole statement (outbox.IsMissingTable).
// Errors: the statement's, naming the tables' count.
func (db *DB) BacklogEach(ctx context.Context, stores []*Store) ([]int64, error) {
	out := make([]int64, len(stores))
	if len(stores) == 0 {
		return out, nil
	}
	var b strings.Builder
	for i, s := range stores {
		if i > 0 {
			b.WriteString("\nUNION ALL ")
		}
		fmt.Fprintf(&b, "SELECT %d, (%s)", i, s.exec.BacklogQuery())
	}
	rows, err := db.SQL.QueryContext(ctx, b.String())
	if err != nil {
		return nil, fmt.Errorf("count the backlog of %d outbox tables: %w", len(stores), err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int
		var n int64
		if err := rows.Scan(&i, &n); err != nil {
			return nil, fmt.Errorf("count the backlog of %d outbox tables: %w", len(stores), err)
		}
		if i >= 0 && i < len(out) {
			out[i] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count the backlog of %d outbox tables: %w", len(stores), err)
	}
	return out, nil
}
