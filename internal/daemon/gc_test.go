package daemon

import (
	"testing"
)

// TestGCPercent: the heap may grow by about the headroom while the live
// heap is smaller than it, by the live heap (GOGC 100) once it is larger;
// the runtime's least heap goal, which grows with GOGC, stays under live
// heap plus headroom.
func TestGCPercent(t *testing.T) {
	t.Parallel()
	const MiB = 1 << 20
	for _, c := range []struct {
		live, headroom int64
		want           int
	}{
		{16 * MiB, 32 * MiB, 200},
		{15 * MiB, 32 * MiB, 200}, // 213
		{10 * MiB, 32 * MiB, 300}, // 320
		{16 * MiB, 64 * MiB, 400},
		{24 * MiB, 32 * MiB, 125}, // 133
		{32 * MiB, 32 * MiB, 100},
		{500 * MiB, 32 * MiB, 100},
		{2 * MiB, 32 * MiB, 850}, // the least goal, 4 MiB × 8.5, is 34 MiB
		{0, 32 * MiB, 825},       // an empty heap counts as 1 MiB
	} {
		got := GCPercent(c.live, c.headroom)
		if got != c.want {
			t.Errorf("GCPercent(%d MiB, %d MiB) = %d, want %d", c.live/MiB, c.headroom/MiB, got, c.want)
		}
		if least := int64(got) * heapMinimum / 100; got > 100 && least > max(c.live, MiB)+c.headroom {
			t.Errorf("GCPercent(%d MiB, %d MiB) = %d: the runtime's least heap goal, %d MiB, passes live + headroom",
				c.live/MiB, c.headroom/MiB, got, least/MiB)
		}
	}
}
