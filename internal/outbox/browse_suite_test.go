package outbox

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Browsing (the console): rows by status newest first, a page at a time,
// filtered by subject and by a part of last_error whose LIKE wildcards are
// taken literally; one row whole with a capped payload preview of binary
// bytes; error groups by status, subject and error prefix.
func suiteBrowse(t *testing.T, b *suiteBundle) {
	ctx := context.Background()
	var ids []int64
	for i := range 6 {
		ids = append(ids, b.insert(t, fmt.Sprintf("b%d", i), ""))
	}
	claimed := b.claimIDs(t, "r", 10)
	require.Len(t, claimed, 6)
	fail := func(id int64, msg string, permanent bool) Failure {
		return Failure{ID: id, Attempt: 1, Err: msg, Permanent: permanent}
	}
	require.Equal(t, int64(5), b.markFailed(t, "r",
		fail(ids[0], "no stream captures subject: 100% sure", true),
		fail(ids[1], "no stream captures subject: 100% sure", true),
		fail(ids[2], "timeout_x", false),
		fail(ids[3], "timeoutAx", false),
		fail(ids[4], "no stream captures subject: 100% sure", true)))
	require.Equal(t, int64(1), b.markDone(t, "r", Done{ID: ids[5], Attempt: 1}))

	list := func(f RowFilter) []int64 {
		t.Helper()
		rows, err := b.exec.ListRows(ctx, &listRowsParams{f})
		require.NoError(t, err)
		var out []int64
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	both := []Status{StatusPermanentFailed, StatusFailed}
	require.Equal(t, []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}, list(RowFilter{Statuses: both, Limit: 10}), "newest first")
	require.Equal(t, []int64{ids[4], ids[3]}, list(RowFilter{Statuses: both, Limit: 2}))
	require.Equal(t, []int64{ids[2], ids[1]}, list(RowFilter{Statuses: both, Before: ids[3], Limit: 2}), "the next page")
	require.Equal(t, []int64{ids[4], ids[1], ids[0]}, list(RowFilter{Statuses: []Status{StatusPermanentFailed}, Limit: 10}))
	require.Equal(t, []int64{ids[1]}, list(RowFilter{Statuses: both, Subject: "events.b1", Limit: 10}))
	require.Equal(t, []int64{ids[2]}, list(RowFilter{Statuses: both, ErrorContains: "timeout_", Limit: 10}), "_ is no wildcard")
	require.Equal(t, []int64{ids[4], ids[1], ids[0]}, list(RowFilter{Statuses: both, ErrorContains: "100%", Limit: 10}), "% is no wildcard")
	require.Empty(t, list(RowFilter{Statuses: both, ErrorContains: "0%s", Limit: 10}))
	require.Equal(t, []int64{ids[5]}, list(RowFilter{Statuses: []Status{StatusDone}, Limit: 10}))
	rows, err := b.exec.ListRows(ctx, &listRowsParams{RowFilter{Statuses: both, Subject: "events.b0", Limit: 1}})
	require.NoError(t, err)
	require.Equal(t, RowSummary{ID: ids[0], Status: StatusPermanentFailed, Subject: "events.b0", Attempts: 1,
		LastError: "no stream captures subject: 100% sure", CreatedAt: rows[0].CreatedAt, AvailableAt: rows[0].AvailableAt}, rows[0])
	require.False(t, rows[0].CreatedAt.IsZero())

	binary := []byte{0, 1, 2, 0xff, 'x', 'y'}
	id, inserted, err := b.exec.Insert(ctx, &insertParams{IdempotencyKey: "bin", Subject: "events.bin", Payload: binary, Headers: `{"a":"b"}`})
	require.NoError(t, err)
	require.True(t, inserted)
	d, ok, err := b.exec.RowDetail(ctx, &rowDetailParams{ID: id, PreviewBytes: 4})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, binary[:4], d.Payload, "the preview is the payload's first bytes")
	require.Equal(t, int64(len(binary)), d.PayloadBytes)
	require.Equal(t, "bin", d.IdempotencyKey)
	require.JSONEq(t, `{"a":"b"}`, d.Headers)
	require.Equal(t, StatusPending, d.Status)
	require.True(t, d.RelayedAt.IsZero())
	done, ok, err := b.exec.RowDetail(ctx, &rowDetailParams{ID: ids[5], PreviewBytes: 100})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []byte("b5"), done.Payload)
	require.Equal(t, StatusDone, done.Status)
	require.False(t, done.RelayedAt.IsZero())
	_, ok, err = b.exec.RowDetail(ctx, &rowDetailParams{ID: id + 1000, PreviewBytes: 4})
	require.NoError(t, err)
	require.False(t, ok)

	groups, err := b.exec.ErrorGroups(ctx, &errorGroupsParams{Scan: 100})
	require.NoError(t, err)
	require.Len(t, groups, 5, "one subject each: %+v", groups)
	total := int64(0)
	for _, g := range groups {
		total += g.Rows
	}
	require.Equal(t, int64(5), total)
	require.Equal(t, StatusPermanentFailed, groups[0].Status, "newest first among equal counts: %+v", groups)
	require.Equal(t, "events.b4", groups[0].Subject)
	require.Equal(t, "no stream captures subject: 100% sure", groups[0].ErrorPrefix)
	require.Equal(t, ids[4], groups[0].NewestID)
	groups, err = b.exec.ErrorGroups(ctx, &errorGroupsParams{Scan: 2})
	require.NoError(t, err)
	require.Len(t, groups, 2, "only the newest rows are grouped")
}
