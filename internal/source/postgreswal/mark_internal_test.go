package postgreswal

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSnapshotVisible: a transaction named by its 32-bit xid (as the log
// names it) is placed nearest the snapshot's xmax, across an epoch
// boundary too, and is visible below xmin and between xmin and xmax
// unless in progress.
func TestSnapshotVisible(t *testing.T) {
	snap, err := parseSnapshot("100:110:103,105")
	require.NoError(t, err)
	for xid, want := range map[uint32]bool{99: true, 100: true, 103: false, 104: true, 105: false, 109: true, 110: false, 200: false} {
		require.Equal(t, want, snap.visible(xid), "xid %d", xid)
	}
	// Epoch 2: xmax is 2<<32 + 5; xid 0xFFFFFFF0 belongs to epoch 1.
	wrap, err := parseSnapshot("8589934590:8589934597:8589934595")
	require.NoError(t, err)
	require.True(t, wrap.visible(0xFFFFFFF0), "the previous epoch")
	require.True(t, wrap.visible(2), "below xmax in this epoch")
	require.False(t, wrap.visible(3), "in progress")
	require.False(t, wrap.visible(5), "at xmax: committed, not visible yet")
	require.False(t, wrap.visible(9), "above xmax: committed, not visible yet")
	_, err = parseSnapshot("1:2")
	require.Error(t, err)
}
