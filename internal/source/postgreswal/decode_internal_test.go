package postgreswal

import (
	"encoding/binary"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"
)

// insertMessage encodes a pgoutput Insert message of protocol version 1.
func insertMessage(rel uint32, cols ...tupleColumn) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, c.kind)
		if c.kind == 't' || c.kind == 'b' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(c.data)))
			b = append(b, c.data...)
		}
	}
	return b
}

// FuzzParseInsert: parseInsert never panics, and reads every message it
// accepts as pglogrepl does (which copies each column, and checks no
// bounds).
func FuzzParseInsert(f *testing.F) {
	f.Add(insertMessage(16384, tupleColumn{'b', []byte{0, 0, 0, 0, 0, 0, 0, 7}}, tupleColumn{'n', nil},
		tupleColumn{'t', []byte("events.x")}, tupleColumn{'u', nil}, tupleColumn{'b', nil}))
	f.Add(insertMessage(1, tupleColumn{'t', []byte("x")})[:12])
	f.Add([]byte("I\x00\x00\x00\x01N\x00\x01x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rel, cols, err := parseInsert(data, nil)
		if err != nil || len(data) < 9 { // pglogrepl wants 8 bytes after the type, a tuple of no column has 7
			return
		}
		msg, err := pglogrepl.Parse(data)
		require.NoError(t, err)
		m, ok := msg.(*pglogrepl.InsertMessage)
		require.True(t, ok, "%T", msg)
		require.Equal(t, m.RelationID, rel)
		require.Len(t, cols, len(m.Tuple.Columns))
		for i, c := range m.Tuple.Columns {
			require.Equal(t, c.DataType, cols[i].kind, "column %d", i)
			require.Equal(t, c.Data, cols[i].data, "column %d", i)
		}
	})
}

// TestIDRuns: consecutive ids of one transaction take one run; after
// normalize, contains finds every id added and no other, across runs that
// overlap or come out of order.
func TestIDRuns(t *testing.T) {
	var r idRuns
	for id := int64(100); id < 200; id++ {
		r.add(id, 10)
	}
	require.Len(t, r, 1)
	r.add(200, 11) // another transaction
	r.add(5, 11)
	r.add(150, 11) // again, after a restart
	r.add(300, 12)
	require.Len(t, r, 5)
	r.normalize()
	require.Len(t, r, 3, "%v", r)
	for id, want := range map[int64]bool{4: false, 5: true, 6: false, 99: false, 100: true, 150: true, 199: true, 200: true, 201: false, 300: true, 301: false} {
		require.Equal(t, want, r.contains(id), "id %d", id)
	}
	// A merged run carries the largest LSN of its parts: it stays until
	// the last of its transactions is confirmed.
	r.keep(12)
	require.Equal(t, idRuns{{first: 300, last: 300, txLSN: 12}}, r)
}
