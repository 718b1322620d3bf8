package postgreswal

import (
	"reflect"
	"sync/atomic"
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

// TestCountersAddCarriesEveryCounter: a rebuilt relay's counters go on from
// the old ones' totals (Inherit), each of them, including any added later.
func TestCountersAddCarriesEveryCounter(t *testing.T) {
	var prev, c Counters
	p, to := reflect.ValueOf(&prev).Elem(), reflect.ValueOf(&c).Elem()
	for i := range p.NumField() {
		p.Field(i).Addr().Interface().(*atomic.Int64).Store(int64(i + 1))
		to.Field(i).Addr().Interface().(*atomic.Int64).Store(100)
	}
	c.add(&prev)
	for i := range to.NumField() {
		require.Equal(t, int64(101+i), to.Field(i).Addr().Interface().(*atomic.Int64).Load(), "counter %s", to.Type().Field(i).Name)
	}
}
