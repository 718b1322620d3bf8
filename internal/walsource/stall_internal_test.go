package walsource

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMovedSample: a row of the last sample that is no longer waiting has
// moved; one that fell off the end of a full sample (rows with lower ids
// joined it) has not.
func TestMovedSample(t *testing.T) {
	full := make([]int64, stallSample)
	for i := range full {
		full[i] = int64(i + 10)
	}
	require.False(t, moved([]int64{1, 2, 3}, []int64{1, 2, 3, 4}), "same rows, one more waiting")
	require.True(t, moved([]int64{1, 2, 3}, []int64{2, 3}), "row 1 settled")
	require.True(t, moved([]int64{1, 2, 3}, []int64{1, 3}), "row 2 settled")
	require.False(t, moved([]int64{200}, full), "row 200 is past the end of a full sample")
	require.True(t, moved([]int64{11, 50}, append([]int64{}, full[2:]...)), "row 11 left a sample that is not full")
}
