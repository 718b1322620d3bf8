package postgreswal

import (
	"bytes"
	"database/sql"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// The columns of the bridge table the source reads from an insert, by
// position in readColumns; the others (and any a service added) are
// ignored.
const (
	colID = iota
	colIdempotencyKey
	colSubject
	colPayload
	colHeaders
	colOrderingKey
	colStatus
	colAttempts
	colCreatedAt
	readCount
)

var readColumns = [readCount]string{"id", "idempotency_key", "subject", "payload", "headers", "ordering_key", "status", "attempts", "created_at"}

// relation is an outbox table as described by a pgoutput Relation
// message, with the position and type of each column the source reads.
type relation struct {
	id      uint32
	schema  string
	name    string
	columns [readCount]column
	// missing names a column the source reads that the table lacks;
	// warned: the reader said so.
	missing string
	warned  bool
	// member is the subscriber of the table, as of set (slotStream.memberOf).
	set    *memberSet
	member *Subscriber
}

type column struct {
	index int
	oid   uint32
}

func newRelation(m *pglogrepl.RelationMessage) *relation {
	r := &relation{id: m.RelationID, schema: m.Namespace, name: m.RelationName}
	for i := range r.columns {
		r.columns[i].index = -1
	}
	for i, c := range m.Columns {
		if k := slices.Index(readColumns[:], c.Name); k >= 0 {
			r.columns[k] = column{index: i, oid: c.DataType}
		}
	}
	for k, c := range r.columns {
		if c.index < 0 {
			r.missing = readColumns[k]
			break
		}
	}
	return r
}

// decoded is one inserted row of the outbox table.
type decoded struct {
	row    outbox.Row
	status outbox.Status
	// err says why the row cannot be read (a column of an unexpected
	// type); the row becomes a dead letter when its id could be read.
	err error
}

// tupleColumn is one column of a pgoutput tuple: its kind ('n' null,
// 'u' unchanged TOAST value, 't' text, 'b' binary) and its bytes.
type tupleColumn struct {
	kind byte
	data []byte
}

// parseInsert reads a pgoutput Insert message of protocol version 1
// ('I', the relation's OID, 'N', then the tuple: a column count and each
// column as a kind byte, and for 't' and 'b' a length and that many bytes;
// PostgreSQL's "Logical Replication Message Formats") into cols, reused.
// The columns' bytes point into data, which points into the connection's
// read buffer: valid until the next message is received. Unlike
// pglogrepl's InsertMessage, nothing is copied: a row is copied once, by
// decode, and a payload left out is never copied.
func parseInsert(data []byte, cols []tupleColumn) (rel uint32, _ []tupleColumn, err error) {
	if len(data) < 8 || data[0] != 'I' || data[5] != 'N' {
		return 0, cols, fmt.Errorf("pgoutput insert: malformed message (%d bytes)", len(data))
	}
	rel = binary.BigEndian.Uint32(data[1:5])
	n := int(binary.BigEndian.Uint16(data[6:8]))
	cols = cols[:0]
	off := 8
	for i := range n {
		if off >= len(data) {
			return 0, cols, fmt.Errorf("pgoutput insert: column %d of %d: message ends", i, n)
		}
		c := tupleColumn{kind: data[off]}
		off++
		switch c.kind {
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(data)-off < 4 {
				return 0, cols, fmt.Errorf("pgoutput insert: column %d of %d: message ends", i, n)
			}
			size := int64(binary.BigEndian.Uint32(data[off : off+4]))
			off += 4
			if size > int64(len(data)-off) {
				return 0, cols, fmt.Errorf("pgoutput insert: column %d of %d: %d bytes, %d left in the message", i, n, size, len(data)-off)
			}
			c.data = data[off : off+int(size)]
			off += int(size)
		default:
			return 0, cols, fmt.Errorf("pgoutput insert: column %d of %d: unknown kind %q", i, n, c.kind)
		}
		cols = append(cols, c)
	}
	return rel, cols, nil
}

// decode reads an inserted tuple: the columns the source reads, in
// pgoutput's binary form (or text, should the server send it), decoded by
// pgx's type map. Every byte kept is copied: the tuple points into the
// connection's read buffer. A payload longer than payloadLimit (> 0) is
// not copied: the row is PayloadLeftOut, with its PayloadSize, and
// becomes a dead letter (it can never be published).
func (r *relation) decode(types *pgtype.Map, tuple []tupleColumn, payloadLimit int64) (decoded, error) {
	var d decoded
	if r.missing != "" {
		return d, fmt.Errorf("table %s.%s has no column %s: not a bridge table (run `bridge migrate`)", r.schema, r.name, r.missing)
	}
	if err := r.scan(types, tuple, colID, &d.row.ID); err != nil {
		return d, err // without an id the row cannot even be dead-lettered
	}
	var key, subject, status pgtype.Text
	var headers pgtype.Text
	var ordering pgtype.Text
	var attempts pgtype.Int4
	var created pgtype.Timestamptz
	for _, c := range []struct {
		col int
		dst any
	}{
		{colIdempotencyKey, &key}, {colSubject, &subject}, {colHeaders, &headers},
		{colOrderingKey, &ordering}, {colStatus, &status}, {colAttempts, &attempts}, {colCreatedAt, &created},
	} {
		if err := r.scan(types, tuple, c.col, c.dst); err != nil {
			d.err = err
			return d, nil
		}
	}
	if err := r.payload(types, tuple, payloadLimit, &d.row); err != nil {
		d.err = err
		return d, nil
	}
	d.row.IdempotencyKey, d.row.Subject = key.String, subject.String
	d.row.Headers = []byte(headers.String)
	d.row.OrderingKey = sql.NullString{String: ordering.String, Valid: ordering.Valid}
	d.row.Attempt = int(attempts.Int32)
	d.row.CreatedAt = created.Time.UTC()
	d.status = outbox.Status(status.String)
	return d, nil
}

// payload reads the payload column into row: Payload and PayloadSize, or
// PayloadLeftOut when it is longer than payloadLimit (> 0). A bytea in
// binary form (what the server sends with binary 'true') is its bytes,
// copied once; any other form goes through the type map.
func (r *relation) payload(types *pgtype.Map, tuple []tupleColumn, payloadLimit int64, row *outbox.Row) error {
	c := r.columns[colPayload]
	if c.index < len(tuple) && tuple[c.index].kind == pglogrepl.TupleDataTypeBinary && c.oid == pgtype.ByteaOID {
		data := tuple[c.index].data
		row.PayloadSize = int64(len(data))
		if payloadLimit > 0 && row.PayloadSize > payloadLimit {
			row.PayloadLeftOut = true
			return nil
		}
		row.Payload = bytes.Clone(data)
		if row.Payload == nil {
			row.Payload = []byte{}
		}
		return nil
	}
	var payload []byte
	if err := r.scan(types, tuple, colPayload, &payload); err != nil {
		return err
	}
	row.Payload, row.PayloadSize = payload, int64(len(payload))
	if payloadLimit > 0 && row.PayloadSize > payloadLimit {
		row.Payload, row.PayloadLeftOut = nil, true
	} else if row.Payload == nil {
		row.Payload = []byte{}
	}
	return nil
}

// scan decodes column col (an index of readColumns) into dst.
func (r *relation) scan(types *pgtype.Map, tuple []tupleColumn, col int, dst any) error {
	c, name := r.columns[col], readColumns[col]
	if c.index >= len(tuple) {
		return fmt.Errorf("column %s: tuple has %d columns", name, len(tuple))
	}
	t := tuple[c.index]
	var format int16
	switch t.kind {
	case pglogrepl.TupleDataTypeBinary:
		format = pgtype.BinaryFormatCode
	case pglogrepl.TupleDataTypeText:
		format = pgtype.TextFormatCode
	case pglogrepl.TupleDataTypeNull:
		return types.Scan(c.oid, pgtype.BinaryFormatCode, nil, dst)
	default: // 'u', an unchanged TOAST value: not sent for inserts
		return fmt.Errorf("column %s: no value in the insert (kind %q)", name, t.kind)
	}
	if err := types.Scan(c.oid, format, t.data, dst); err != nil {
		return fmt.Errorf("column %s: %w", name, err)
	}
	return nil
}

// rowSize is what a row read takes in the subscriber's memory, as
// relay.max_in_flight_bytes counts it (the table source's rule): the
// payload read and the headers.
func rowSize(r *outbox.Row) int64 { return int64(len(r.Payload)) + int64(len(r.Headers)) }
