package lr

import "math/bits"

// batchIndex maps the distinct keys of one mini-batch to their positions:
// an open-addressing hash table (linear probing, Fibonacci hashing) sized
// to the batch, not to the table. A slot is 8 bytes, a 31-bit fingerprint
// of the key's hash and the key's position; the key itself is the
// batch's keys[position], which a fingerprint match checks. A batch of 100
// rows x 20 features needs 4096 slots (32 KiB, a core's L1 cache), where
// an array over a 1M-key table (8 MiB per worker) misses on every rarely
// seen key and evicts the model's own lines. Reset clears the slots the
// batch uses.
type batchIndex struct {
	slots []uint64 // len a power of two, at least twice the keys it holds; 0 is empty
	buf   []uint64 // slots' backing array, kept across batches
	shift uint8    // 64 - log2(len(slots))
	sink  uint64   // Touch's loads end here, so they are not dropped
}

// fib is 2^64 / the golden ratio: multiplying by it spreads consecutive
// and strided ids over the whole table.
const fib = 0x9e3779b97f4a7c15

// Reset forgets every key and makes room for up to n distinct keys at a
// load of at most one half.
func (x *batchIndex) Reset(n int) {
	need := 2 * max(n, 8)
	size := 1 << bits.Len(uint(need-1))
	if cap(x.buf) < size {
		x.buf = make([]uint64, size)
	}
	x.slots = x.buf[:size]
	clear(x.slots)
	x.shift = uint8(64 - bits.Len(uint(size-1)))
}

// slot returns k's home slot and the fingerprint its slot holds (never 0).
func (x *batchIndex) slot(k uint64) (uint64, uint64) {
	h := k * fib
	return h >> x.shift, (h>>16 | 1) << 32 // the low word is the position
}

// Lookup returns k's position, or inserts k at position next and returns
// next with added true. keys are the batch's keys so far (keys[p] is the
// key at position p < next); Reset's n bounds the keys inserted.
func (x *batchIndex) Lookup(k uint64, next int32, keys []uint64) (pos int32, added bool) {
	mask := uint64(len(x.slots) - 1)
	i, fp := x.slot(k)
	for ; ; i = (i + 1) & mask {
		s := x.slots[i]
		if s == 0 {
			x.slots[i] = fp | uint64(uint32(next))
			return next, true
		}
		if s&^0xffffffff == fp {
			if p := int32(uint32(s)); keys[p] == k {
				return p, false
			}
		}
	}
}

// Touch loads the home slot of every key in keys, results unused: the
// loads are independent, so the core overlaps their cache misses, where
// Lookup's loads wait on each other (each insert decides the next
// position) and on its branches. Between batches the index's lines leave
// the core's caches (the slave's server and the kernel run on the same
// core), and without Touch every Lookup paid its own miss.
func (x *batchIndex) Touch(keys []uint64) {
	var sum uint64
	for _, k := range keys {
		i, _ := x.slot(k)
		sum += x.slots[i]
	}
	x.sink = sum
}
