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
