package daemon

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// GCHeadroomDefault is the least the heap may grow between two garbage
// collections of `bridge run` (TuneGC): 32 MiB.
const GCHeadroomDefault = 32 << 20

// heapMinimum is the Go runtime's least heap goal at GOGC 100 (4 MiB,
// runtime/mgcpacer.go defaultHeapMinimum); it scales with GOGC.
const heapMinimum = 4 << 20

// TuneGC keeps the garbage collector from running more often than once per
// headroom bytes allocated while the live heap is small, until ctx ends:
// after every collection it sets GOGC to GCPercent(live heap, headroom),
// so that the heap may grow by about headroom before the next collection,
// or by the live heap when that is larger, as the default GOGC of 100
// allows.
//
// A relay's live heap is small (about 15 MiB with rows of 256 bytes) and
// it allocates a few KiB per row (the database driver's rows, the NATS
// client's messages and PubAcks): with GOGC 100 it collected every few
// thousand rows, and the collector's marking and sweeping took a quarter
// of its CPU in a bridge-bench profile. With large payloads the live heap
// is larger than the headroom and nothing changes. The memory limit
// (GOMEMLIMIT, SetMemoryLimit) still bounds the heap: the collector runs
// as often as it must to stay under it.
//
// It does nothing when GOGC is set in the environment: the operator's
// choice stands.
func TuneGC(ctx context.Context, headroom int64, logger *slog.Logger) {
	if v := os.Getenv("GOGC"); v != "" {
		logger.Info("garbage collector: GOGC from the environment", slog.String("gogc", v))
		return
	}
	t := &gcTuner{ctx: ctx, headroom: headroom, current: 100, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.tune()
	t.arm()
}

// gcTuner sets GOGC after every collection: a finalizer of an object
// dropped at once runs after the collection that finds it unreachable,
// and arms the next one.
type gcTuner struct {
	ctx      context.Context
	headroom int64
	current  int
	sample   []metrics.Sample
}

// gcSentinel is large enough not to be batched with other tiny objects,
// whose finalizers would run late.
type gcSentinel struct{ _ [32]byte }

func (t *gcTuner) arm() { runtime.SetFinalizer(&gcSentinel{}, t.collected) }

func (t *gcTuner) collected(*gcSentinel) {
	if t.ctx.Err() != nil {
		debug.SetGCPercent(100)
		return
	}
	t.tune()
	t.arm()
}

// tune sets GOGC for the live heap of the last collection.
func (t *gcTuner) tune() {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	if p := GCPercent(int64(t.sample[0].Value.Uint64()), t.headroom); p != t.current {
		debug.SetGCPercent(p)
		t.current = p
	}
}

// GCPercent is the GOGC that lets a heap of live bytes grow by about
// max(headroom, live) before the next collection, in steps of 25 so that
// it changes seldom: 100 (the runtime's default) when live is at least
// headroom, more below. The runtime's least heap goal grows with GOGC
// (heapMinimum × GOGC / 100): GOGC stays low enough that it does not pass
// live + headroom.
func GCPercent(live, headroom int64) int {
	live = max(live, 1<<20)
	if live >= headroom {
		return 100
	}
	p := min(headroom*100/live, (live+headroom)*100/heapMinimum)
	return max(int(p)/25*25, 100)
}
