package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Browsing reads what an operator looks at (the console, internal/console):
// rows by status, one row whole, and the failed rows grouped by their
// error. Every read is bounded (a LIMIT, a preview of the payload) and
// takes no lock: it never slows the relay's claims and marks. Their SQL is
// in queries/<dialect>/list_rows.sql, row_detail.sql and error_groups.sql.

// Browsing bounds.
const (
	// ListRowsMax is the most rows ListRows returns at once.
	ListRowsMax = 500
	// ErrorGroupsScanDefault is how many of the newest failed and
	// dead-letter rows ErrorGroups groups when RowFilter gives no bound.
	ErrorGroupsScanDefault = 10_000
	// ErrorPrefixBytes is how much of last_error ErrorGroups groups by:
	// errors that differ only later (a row id, a sequence) fall in one group.
	ErrorPrefixBytes = 120
	// summaryErrorBytes is how much of last_error ListRows reads.
	summaryErrorBytes = 500
)

// RowFilter selects rows to list.
type RowFilter struct {
	// Statuses are the statuses to list: one or two of Statuses. Required.
	Statuses []Status
	// Subject, when set, lists only rows of this exact subject.
	Subject string
	// ErrorContains, when set, lists only rows whose last_error contains
	// it (the database's own comparison: case-insensitive on MySQL's
	// default collation and for ASCII on SQLite, exact on PostgreSQL).
	ErrorContains string
	// Before, when > 0, lists only rows with a smaller id: the next page
	// after a page whose last id it is.
	Before int64
	// Limit is the page size, 1 to ListRowsMax.
	Limit int
}

// RowSummary is one row of a listing.
type RowSummary struct {
	ID       int64
	Status   Status
	Subject  string
	Attempts int
	// LastError is the first 500 bytes of last_error.
	LastError   string
	CreatedAt   time.Time
	AvailableAt time.Time
}

// RowDetail is one row whole, but for its payload.
type RowDetail struct {
	RowSummary
	IdempotencyKey string
	OrderingKey    string // empty: none
	Headers        string // the JSON object as stored
	Owner          string
	ClaimedAt      time.Time // zero: never
	FirstClaimedAt time.Time
	RelayedAt      time.Time
	Stream         string
	StreamSeq      int64
	// PayloadBytes is the payload's length; Payload its first bytes.
	PayloadBytes int64
	Payload      []byte
}

// ErrorGroup is the failed or dead-letter rows of one subject whose
// last_error starts alike.
type ErrorGroup struct {
	Status      Status
	Subject     string
	ErrorPrefix string // the first ErrorPrefixBytes bytes of last_error
	Rows        int64
	NewestID    int64
}

// listRowsParams are the parameters of executor.ListRows: the statement
// takes its arguments in the order of args, the same on every dialect.
type listRowsParams struct{ RowFilter }

func (p *listRowsParams) args() []any {
	first, second := p.Statuses[0], p.Statuses[0]
	if len(p.Statuses) > 1 {
		second = p.Statuses[1]
	}
	like := ""
	if p.ErrorContains != "" {
		like = "%" + escapeLike(p.ErrorContains) + "%"
	}
	return []any{string(first), string(second), p.Subject, p.Subject, like, like, p.Before, p.Before, p.Limit}
}

// escapeLike escapes LIKE's wildcards with '!', the ESCAPE character of
// list_rows.sql.
func escapeLike(s string) string {
	return strings.NewReplacer("!", "!!", "%", "!%", "_", "!_").Replace(s)
}

// rowDetailParams are the parameters of executor.RowDetail.
type rowDetailParams struct {
	ID           int64
	PreviewBytes int
}

// errorGroupsParams are the parameters of executor.ErrorGroups.
type errorGroupsParams struct {
	Scan int
}

// browseQueries are the browsing statements of a dialect.
type browseQueries struct {
	listRows, rowDetail, errorGroups string
}

func takeBrowseQueries(f *queryFiles) browseQueries {
	return browseQueries{
		listRows:    f.take("list_rows"),
		rowDetail:   f.take("row_detail"),
		errorGroups: f.take("error_groups"),
	}
}

func (r readers) ListRows(ctx context.Context, p *listRowsParams) ([]RowSummary, error) {
	rows, err := r.sql.QueryContext(ctx, r.browse.listRows, p.args()...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []RowSummary
	for rows.Next() {
		var s RowSummary
		var status string
		var msg sql.NullString
		if err := rows.Scan(&s.ID, &status, &s.Subject, &s.Attempts, &msg, dbTime{&s.CreatedAt}, dbTime{&s.AvailableAt}); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		s.Status, s.LastError = Status(status), msg.String
		out = append(out, s)
	}
	return out, rows.Err()
}

func (r readers) RowDetail(ctx context.Context, p *rowDetailParams) (RowDetail, bool, error) {
	var d RowDetail
	var status string
	var msg, key, owner, stream sql.NullString
	var seq sql.NullInt64
	err := r.sql.QueryRowContext(ctx, r.browse.rowDetail, p.PreviewBytes, p.ID).Scan(
		&d.ID, &d.IdempotencyKey, &d.Subject, &d.Headers, &key, &status, &d.Attempts, &msg, &owner,
		dbTime{&d.CreatedAt}, dbTime{&d.AvailableAt}, dbTime{&d.ClaimedAt}, dbTime{&d.FirstClaimedAt},
		dbTime{&d.RelayedAt}, &stream, &seq, &d.PayloadBytes, &d.Payload)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return d, false, nil
	case err != nil:
		return d, false, err
	}
	d.Status, d.LastError, d.OrderingKey, d.Owner = Status(status), msg.String, key.String, owner.String
	d.Stream, d.StreamSeq = stream.String, seq.Int64
	return d, true, nil
}

func (r readers) ErrorGroups(ctx context.Context, p *errorGroupsParams) ([]ErrorGroup, error) {
	rows, err := r.sql.QueryContext(ctx, r.browse.errorGroups, p.Scan)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ErrorGroup
	for rows.Next() {
		var g ErrorGroup
		var status string
		var prefix sql.NullString
		if err := rows.Scan(&status, &g.Subject, &prefix, &g.Rows, &g.NewestID); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		g.Status, g.ErrorPrefix = Status(status), prefix.String
		out = append(out, g)
	}
	return out, rows.Err()
}

// ListRows lists the rows f selects, newest first. Errors: a filter
// without statuses, with an unknown status or a limit outside 1 to
// ListRowsMax wraps ErrInvalidEntry; else the database's error.
func (s *Store) ListRows(ctx context.Context, f RowFilter) ([]RowSummary, error) {
	if len(f.Statuses) == 0 || len(f.Statuses) > 2 {
		return nil, fmt.Errorf("list outbox rows: %w: give one or two statuses", ErrInvalidEntry)
	}
	for _, st := range f.Statuses {
		if !slices.Contains(Statuses, st) {
			return nil, fmt.Errorf("list outbox rows: %w: status %q is not one of %v", ErrInvalidEntry, st, Statuses)
		}
	}
	if f.Limit < 1 || f.Limit > ListRowsMax {
		return nil, fmt.Errorf("list outbox rows: %w: limit %d is not between 1 and %d", ErrInvalidEntry, f.Limit, ListRowsMax)
	}
	out, err := s.exec.ListRows(ctx, &listRowsParams{f})
	if err != nil {
		return nil, fmt.Errorf("list outbox rows: %w", err)
	}
	return out, nil
}

// Row reads row id with the first previewBytes bytes of its payload;
// false when there is no such row.
func (s *Store) Row(ctx context.Context, id int64, previewBytes int) (RowDetail, bool, error) {
	d, ok, err := s.exec.RowDetail(ctx, &rowDetailParams{ID: id, PreviewBytes: max(previewBytes, 0)})
	if err != nil {
		return d, false, fmt.Errorf("read outbox row %d: %w", id, err)
	}
	return d, ok, nil
}

// ErrorGroups groups the scan newest failed and dead-letter rows (at most
// ErrorGroupsScanDefault when scan <= 0) by status, subject and the first
// ErrorPrefixBytes bytes of last_error, the largest groups first (at most
// 100 groups).
func (s *Store) ErrorGroups(ctx context.Context, scan int) ([]ErrorGroup, error) {
	if scan <= 0 {
		scan = ErrorGroupsScanDefault
	}
	out, err := s.exec.ErrorGroups(ctx, &errorGroupsParams{Scan: scan})
	if err != nil {
		return nil, fmt.Errorf("group failed outbox rows: %w", err)
	}
	return out, nil
}
