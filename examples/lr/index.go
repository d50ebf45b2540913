package lr

import "math/bits"

// batchIndex maps the distinct keys of one mini-batch to their positions:
// an open-addressing hash table (linear probing, Fibonacci hashing) sized
// to the batch, not to the table. A batch of 100 rows x 20 features needs
// 4096 slots (64 KiB), which stay in the core's cache, where an array
// over a 1M-key table (8 MiB per worker) misses on every rarely seen key
// and evicts the model's own lines. Slots carry the batch's stamp, so
// Reset forgets every key without clearing.
type batchIndex struct {
	slots []indexSlot // len a power of two, at least twice the keys it holds
	shift uint8       // 64 - log2(len(slots))
	stamp uint32
	sink  uint32 // Touch's loads end here, so they are not dropped
}

type indexSlot struct {
	key   uint64
	stamp uint32
	pos   int32
}

// fib is 2^64 / the golden ratio: multiplying by it spreads consecutive
// and strided ids over the whole table.
const fib = 0x9e3779b97f4a7c15

// Reset forgets every key and makes room for up to n distinct keys at a
// load of at most one half.
func (x *batchIndex) Reset(n int) {
	if need := 2 * max(n, 8); len(x.slots) < need {
		size := 1 << bits.Len(uint(need-1))
		x.slots = make([]indexSlot, size)
		x.shift = uint8(64 - bits.Len(uint(size-1)))
		x.stamp = 0
	}
	x.stamp++
	if x.stamp == 0 { // wrapped: old stamps could collide
		clear(x.slots)
		x.stamp = 1
	}
}

// Lookup returns k's position, or inserts k at position next and returns
// next with added true. Reset's n bounds the keys inserted.
func (x *batchIndex) Lookup(k uint64, next int32) (pos int32, added bool) {
	mask := uint64(len(x.slots) - 1)
	for i := (k * fib) >> x.shift; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.stamp != x.stamp {
			*s = indexSlot{key: k, stamp: x.stamp, pos: next}
			return next, true
		}
		if s.key == k {
			return s.pos, false
		}
	}
}

// Touch loads the slot of every key in keys, results unused: the loads
// are independent, so the core overlaps their cache misses, where Lookup's
// loads wait on each other (each insert decides the next position) and on
// its branches. Between batches the index's lines leave the core's
// caches (the slave's server and the kernel run on the same core), and
// without Touch every Lookup paid its own miss.
func (x *batchIndex) Touch(keys []uint64) {
	var sum uint32
	for _, k := range keys {
		sum += x.slots[(k*fib)>>x.shift].stamp
	}
	x.sink = sum
}
