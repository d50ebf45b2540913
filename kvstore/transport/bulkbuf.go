package transport

import (
	"runtime"
	"sync"
)

// The largest buffer class carries bulk traffic: an Add, Set or answer of
// about a megabyte, a stream of which keeps up to a connection's queue of
// them in flight. A sync.Pool empties at every other garbage collection,
// and bulk traffic allocates enough to collect often: each lost buffer
// came back as a fresh allocation whose pages fault in as they are first
// written (converting float64 deltas into a fresh 1 MB buffer runs at
// about 4 GB/s, into a reused one at 10; with the list, bench/kv -procs
// on 62,500 keys x 64 measured Add 1.08-1.26x, Get 1.02-1.10x). The
// largest class therefore keeps up to bulkKeep buffers, a queue's worth,
// on a free list the collector does not empty. An idle process does not
// hold them for long: each collection that finds the list unused since
// the one before gives half of it back (the runtime collects at least
// every two minutes).

// bulkSize is the largest class: a frame of the largest payload.
const bulkSize = 1<<20 + 1<<17

// bulkClass is the index in bufClasses of the class kept on bulk.
const bulkClass = len(bufClasses) - 1

// bulkKeep bounds the buffers bulk keeps: a full connection queue.
const bulkKeep = (maxQueued + bulkSize - 1) / bulkSize

var bulk = newBulkBufs(bulkKeep)

// bulkBufs is a bounded free list of buffers of the bulk class.
type bulkBufs struct {
	mu   sync.Mutex
	free []*[]byte
	keep int
	used bool // a get or put since the last collection
}

func newBulkBufs(keep int) *bulkBufs {
	p := &bulkBufs{keep: keep}
	p.watch()
	return p
}

// get returns a kept buffer, or nil.
func (p *bulkBufs) get() *[]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used = true
	n := len(p.free)
	if n == 0 {
		return nil
	}
	b := p.free[n-1]
	p.free[n-1] = nil
	p.free = p.free[:n-1]
	return b
}

// put keeps b if there is room, and reports whether it did.
func (p *bulkBufs) put(b *[]byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used = true
	if len(p.free) >= p.keep {
		return false
	}
	p.free = append(p.free, b)
	return true
}

// collected runs after a garbage collection: an unused list gives half
// its buffers back (all of a last one). It reports whether to go on
// watching: a list that may keep nothing is done.
func (p *bulkBufs) collected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.used {
		keep := len(p.free) / 2
		clear(p.free[keep:])
		p.free = p.free[:keep]
	}
	p.used = false
	return p.keep > 0
}

// kept is how many buffers the list holds.
func (p *bulkBufs) kept() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// watch calls collected after the next garbage collection, and again
// after each one after it: the cleanup of an object nothing references
// runs once the collector has found it unreachable.
func (p *bulkBufs) watch() {
	runtime.AddCleanup(new(gcSentinel), func(p *bulkBufs) {
		if p.collected() {
			p.watch()
		}
	}, p)
}

// gcSentinel is large enough to stay out of the tiny allocator, whose
// blocks may hold several objects and so outlive any one of them.
type gcSentinel [32]byte
