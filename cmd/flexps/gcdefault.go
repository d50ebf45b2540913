package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The Go collector's default (GOGC=100) lets the heap grow to twice what
// is live before it collects. A slave's live heap is mostly its tables and
// parsed-data cache, large and long-lived, so that doubling is what sets
// the process's peak memory, while what it allocates between collections
// is short-lived (messages, batches). When the environment sets neither
// GOGC nor GOMEMLIMIT, flexps keeps a soft memory limit (debug.
// SetMemoryLimit) of the live heap plus a quarter of it, at least
// gcMinHeadroom, plus the runtime's own memory outside the heap,
// recomputed after every collection (a finalizer on a sentinel object runs
// once per cycle). Heaps larger than 4 x gcMinHeadroom thus grow by a
// quarter between collections instead of doubling, smaller ones by the
// floor, and ones under gcMinHeadroom as GOGC=100 lets them (it collects
// first). A collection marks the live heap, and one comes every headroom's
// worth of allocation, so the collector marks at most 4 live bytes per
// byte allocated, at every heap size, as for the large heaps. A training job allocates little once its
// data is parsed: the LR job's slaves collect a few times per epoch of
// the ps kind (about 2% of a core), the local kind not at all. The limit
// is soft: the runtime never spends more than about half the CPU on
// collections to keep it. Setting GOGC or GOMEMLIMIT (GOGC=100 restores
// Go's default) turns this off.

// gcMinHeadroom is the least heap growth allowed between collections.
const gcMinHeadroom = 8 << 20

// gcLimit is the soft memory limit for a live heap of live bytes and
// nonHeap bytes of runtime memory outside the heap (stacks, metadata).
func gcLimit(live, nonHeap uint64) int64 {
	return int64(live + max(live/4, gcMinHeadroom) + nonHeap)
}

// tuneGC installs the memory limit policy unless getenv sets GOGC or
// GOMEMLIMIT; stop (nil when it did not) removes it.
func tuneGC(getenv func(string) string) (stop func()) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return nil
	}
	t := &gcTuner{samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
	}}
	t.adjust()
	t.arm()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.stopped = true
		debug.SetMemoryLimit(math.MaxInt64)
	}
}

// gcTuner recomputes the limit after each collection: a finalizer on an
// unreachable sentinel runs once per cycle and arms the next one.
type gcTuner struct {
	mu      sync.Mutex
	samples []metrics.Sample
	stopped bool
}

// gcSentinel holds a pointer so that it is not a tiny allocation (those
// share blocks, and their finalizers may never run).
type gcSentinel struct{ t *gcTuner }

func (t *gcTuner) arm() {
	runtime.SetFinalizer(&gcSentinel{t}, func(s *gcSentinel) {
		if s.t.adjust() {
			s.t.arm()
		}
	})
}

// adjust sets the limit for the heap as the last collection left it;
// false once stopped.
func (t *gcTuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.samples)
	v := func(i int) uint64 {
		if t.samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return t.samples[i].Value.Uint64()
	}
	live, total, released, objects, free, unused := v(0), v(1), v(2), v(3), v(4), v(5)
	var nonHeap uint64
	if heap := released + objects + free + unused; total > heap {
		nonHeap = total - heap
	}
	debug.SetMemoryLimit(gcLimit(live, nonHeap))
	return true
}
