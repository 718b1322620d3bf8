package walsource

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// The columns of the bridge table the source reads from an insert; the
// others (and any a service added) are ignored.
var readColumns = []string{"id", "idempotency_key", "subject", "payload", "headers", "ordering_key", "status", "attempts", "created_at"}

// relation is an outbox table as described by a pgoutput Relation
// message, with the position of each column the source reads.
type relation struct {
	id      uint32
	schema  string
	name    string
	columns map[string]column
}

type column struct {
	index int
	oid   uint32
}

// errOtherTable marks an insert into a table other than the outbox (a
// publication that was extended by hand); it is skipped.
var errOtherTable = errors.New("insert into another table")

func newRelation(m *pglogrepl.RelationMessage) *relation {
	r := &relation{id: m.RelationID, schema: m.Namespace, name: m.RelationName, columns: make(map[string]column, len(readColumns))}
	for i, c := range m.Columns {
		if slices.Contains(readColumns, c.Name) {
			r.columns[c.Name] = column{index: i, oid: c.DataType}
		}
	}
	return r
}

// is reports whether the relation is the table t (as resolved by
// resolveTable).
func (r *relation) is(t qualifiedName) bool { return r.schema == t.schema && r.name == t.name }

// decoded is one inserted row of the outbox table.
type decoded struct {
	row    outbox.Row
	status outbox.Status
	// err says why the row cannot be read (a column of an unexpected
	// type); the row becomes a dead letter when its id could be read.
	err error
}

// decode reads an inserted tuple: the columns the source reads, in
// pgoutput's binary form (or text, should the server send it), decoded by
// pgx's type map. Every byte is copied: the tuple points into the
// connection's read buffer.
func (r *relation) decode(types *pgtype.Map, tuple *pglogrepl.TupleData) (decoded, error) {
	var d decoded
	if tuple == nil {
		return d, errors.New("insert without a tuple")
	}
	for _, name := range readColumns {
		if _, ok := r.columns[name]; !ok {
			return d, fmt.Errorf("table %s.%s has no column %s: not a bridge table (run `bridge migrate`)", r.schema, r.name, name)
		}
	}
	if err := r.scan(types, tuple, "id", &d.row.ID); err != nil {
		return d, err // without an id the row cannot even be dead-lettered
	}
	var key, subject, status pgtype.Text
	var headers pgtype.Text
	var ordering pgtype.Text
	var attempts pgtype.Int4
	var created pgtype.Timestamptz
	var payload []byte
	for _, c := range []struct {
		name string
		dst  any
	}{
		{"idempotency_key", &key}, {"subject", &subject}, {"payload", &payload}, {"headers", &headers},
		{"ordering_key", &ordering}, {"status", &status}, {"attempts", &attempts}, {"created_at", &created},
	} {
		if err := r.scan(types, tuple, c.name, c.dst); err != nil {
			d.err = err
			return d, nil
		}
	}
	d.row.IdempotencyKey, d.row.Subject = key.String, subject.String
	d.row.Payload = payload // a copy (pgtype copies bytea)
	if d.row.Payload == nil {
		d.row.Payload = []byte{}
	}
	d.row.Headers = []byte(headers.String)
	d.row.OrderingKey = sql.NullString{String: ordering.String, Valid: ordering.Valid}
	d.row.Attempt = int(attempts.Int32)
	d.row.CreatedAt = created.Time.UTC()
	d.status = outbox.Status(status.String)
	return d, nil
}

// scan decodes one column into dst.
func (r *relation) scan(types *pgtype.Map, tuple *pglogrepl.TupleData, name string, dst any) error {
	c := r.columns[name]
	if c.index >= len(tuple.Columns) {
		return fmt.Errorf("column %s: tuple has %d columns", name, len(tuple.Columns))
	}
	col := tuple.Columns[c.index]
	var format int16
	switch col.DataType {
	case pglogrepl.TupleDataTypeBinary:
		format = pgtype.BinaryFormatCode
	case pglogrepl.TupleDataTypeText:
		format = pgtype.TextFormatCode
	case pglogrepl.TupleDataTypeNull:
		return types.Scan(c.oid, pgtype.BinaryFormatCode, nil, dst)
	default: // 'u', an unchanged TOAST value: not sent for inserts
		return fmt.Errorf("column %s: no value in the insert (kind %q)", name, col.DataType)
	}
	if err := types.Scan(c.oid, format, col.Data, dst); err != nil {
		return fmt.Errorf("column %s: %w", name, err)
	}
	return nil
}
