package kvstore

import (
	"math"
	"math/bits"
	"slices"
	"unsafe"
)

// rowTable is one stripe of a sparse store: an ordered linear-probing hash
// table (Amble and Knuth's ordered hash table) that keeps each key's row
// of values inline, in a parallel array, next to the key.
//
// A key is stored as its hash h = (key+1)*slotMul, a bijection on uint64
// that maps no key below MaxUint64 to 0, so 0 marks an empty slot and the
// key comes back as h*slotMulInv-1. A hash's home slot is the high word of
// h*homes (a multiply-high range reduction, so the table may have any
// size). Since the home is monotone in h, linear probing can keep every
// slot's hash greater than those before it: an insert shifts the run
// after its slot right by one, up to the run's first empty slot. Lookups
// then stop at the first hash that is not smaller than theirs, so a miss
// costs what a hit does, and the table stays fast at loads up to
// tableMaxLoad. The homes end tablePad slots (or more, see extend) before
// the array does, so runs near the end have room; the last slot is always
// empty, which ends every probe before the end of the array.
//
// Memory: a key of width 1 float32 costs 12 bytes per slot, and the
// table grows by tableGrowth once it is tableMaxLoad full, so its load
// stays between 0.74 and 0.92. Each stripe's growth steps are offset by
// phase (a fraction of a step), so the 16 stripes of a store grow at
// different key counts and the store as a whole stays near the mean load
// (about 0.82, 14-15 bytes per key) instead of all falling to 0.74 at
// once. The allocator's size classes would undo that where they step as
// far as a growth step does, which alloc and rebuild work around. A
// rebuild places the old entries in hash order into the new arrays in one
// pass; only then are the old arrays dropped, so a stripe briefly holds
// both (about 1/16 of the store, for a millisecond or two at 1M keys).
type rowTable[P float] struct {
	keys   []uint64 // hashes in ascending order with 0 (empty) between; the last is 0
	vals   []P      // stride values per slot, moved with their key
	stride int
	homes  uint64  // home slots: [0, homes)
	n      int     // keys held
	limit  int     // n at which the next insert grows the table
	level  int     // growth steps taken (-1: never allocated)
	phase  float64 // offset of this table's growth steps, in steps
}

const (
	tableMinHomes = 8
	tableGrowth   = 1.25
	tableMaxLoad  = 0.92
	tablePad      = 8

	// tableRoundedLoad bounds the load right after a rebuild whose
	// allocation was rounded down to a page (see rebuild).
	tableRoundedLoad = 0.85
	// largeObject and pageBytes are the Go allocator's: objects larger
	// than largeObject bytes take whole pages of pageBytes.
	largeObject = 32 << 10
	pageBytes   = 8 << 10
)

// slotMul is splitmix64's second multiplier: odd, so key*slotMul is a
// bijection. It is not stripeOf's: the keys of one stripe agree on the top
// bits of stripeOf's product, which would crowd them into a few homes.
const slotMul = 0xbf58476d1ce4e5b9

// slotMulInv is slotMul's inverse modulo 2^64.
var slotMulInv = func() uint64 {
	x := uint64(slotMul) // correct to 3 bits; each Newton step doubles that
	for range 5 {
		x *= 2 - slotMul*x
	}
	return x
}()

// emptySlots is every empty table's key array: a probe reads its one empty
// slot; the first insert allocates the table's own.
var emptySlots = []uint64{0}

func newRowTable[P float](stride int, phase float64) rowTable[P] {
	return rowTable[P]{keys: emptySlots, stride: stride, level: -1, phase: phase}
}

// hashKey is key's stored form; key must be < MaxUint64.
func hashKey(key uint64) uint64 { return (key + 1) * slotMul }

// unhashKey inverts hashKey.
func unhashKey(h uint64) uint64 { return h*slotMulInv - 1 }

func (t *rowTable[P]) home(h uint64) int {
	hi, _ := bits.Mul64(h, t.homes)
	return int(hi)
}

// seek returns the slot that holds h, or where h would be inserted (the
// first slot from h's home that is empty or holds a larger hash).
func (t *rowTable[P]) seek(h uint64) int {
	i := t.home(h)
	keys := t.keys
	h1 := h - 1
	// 0 < keys[i] < h, in one comparison: an empty slot wraps to MaxUint64.
	for keys[i]-1 < h1 {
		i++
	}
	return i
}

// row is slot i's values.
func (t *rowTable[P]) row(i int) []P { return t.vals[i*t.stride:][:t.stride] }

// insert puts h, which the table does not hold, at slot i = seek(h) and
// returns its slot (another one if the table had to grow). The slot's
// values are stale: the caller sets them.
func (t *rowTable[P]) insert(i int, h uint64) int {
	if t.n >= t.limit {
		t.grow()
		i = t.seek(h)
	}
	j := i
	for t.keys[j] != 0 {
		j++
	}
	if j == len(t.keys)-1 {
		t.extend()
	}
	if j > i {
		copy(t.keys[i+1:j+1], t.keys[i:j])
		s := t.stride
		copy(t.vals[(i+1)*s:(j+1)*s], t.vals[i*s:j*s])
	}
	t.keys[i] = h
	t.n++
	return i
}

// grow rebuilds the table at the next step of its growth sequence that
// is larger than the table is (the allocator may have rounded the last
// step up past the next one) and has room for another key.
func (t *rowTable[P]) grow() {
	for {
		t.level++
		homes := uint64(math.Ceil(tableMinHomes * math.Pow(tableGrowth, float64(t.level)+t.phase)))
		if homes > t.homes && int(float64(homes)*tableMaxLoad) > t.n {
			t.rebuild(homes)
			return
		}
	}
}

// rebuild moves the entries to new arrays of at least homes home slots
// (more if the allocator's size class has room: that memory would be
// lost anyway). Taken in hash order, each entry goes to its new home or
// right after the entry placed before it, whichever is later: one pass,
// no probing.
func (t *rowTable[P]) rebuild(homes uint64) {
	want := int(homes) + tablePad
	if b := t.words(want) * 8; b > largeObject && !t.small(want) {
		// Large objects take whole pages. Rounding down to a page instead
		// of up keeps the mean load near its target at sizes where a page
		// is a large step (up to 20% just above largeObject), as long as
		// the table is still at most tableRoundedLoad full afterwards.
		down := b &^ (pageBytes - 1) / 8
		if n := t.slots(down); down*8 >= largeObject && float64(t.n+1) <= tableRoundedLoad*float64(n-tablePad) {
			want = n
		}
	}
	keys, vals := t.alloc(want)
	homes = uint64(len(keys) - tablePad)
	last := -1
	for _, h := range t.keys {
		if h != 0 {
			hi, _ := bits.Mul64(h, homes)
			last = max(int(hi), last+1)
		}
	}
	if last+2 > len(keys) { // a crowded top of the range
		keys, vals = t.alloc(last + 2 + tablePad)
	}
	s := t.stride
	last = -1
	for i, h := range t.keys {
		if h == 0 {
			continue
		}
		hi, _ := bits.Mul64(h, homes)
		p := max(int(hi), last+1)
		keys[p] = h
		if s == 1 {
			vals[p] = t.vals[i]
		} else {
			copy(vals[p*s:(p+1)*s], t.vals[i*s:(i+1)*s])
		}
		last = p
	}
	t.keys, t.vals, t.homes = keys, vals, homes
	t.limit = max(1, int(float64(homes)*tableMaxLoad))
}

// alloc returns zeroed arrays of at least n slots, and more if the
// allocator's size class leaves room. Keys and values share one
// allocation (the values after the keys), so a table pays one size
// class's rounding, not two, and uses all of it. The values start on a
// 64-byte boundary of the allocation, so rows of 64 bytes (or a multiple)
// do not straddle cache lines.
func (t *rowTable[P]) alloc(n int) ([]uint64, []P) {
	if t.small(n) {
		keys := slices.Grow([]uint64(nil), n)
		vals := slices.Grow([]P(nil), n*t.stride)
		n = min(cap(keys), cap(vals)/t.stride)
		return keys[:n:n], vals[:n*t.stride]
	}
	mem := slices.Grow([]uint64(nil), t.words(n))
	mem = mem[:cap(mem)]
	n = t.slots(len(mem))
	// The values are floats, so the words hold no pointers either way; a
	// pointer into mem keeps all of it alive.
	vals := unsafe.Slice((*P)(unsafe.Pointer(unsafe.SliceData(mem[(n+7)&^7:]))), n*t.stride)
	return mem[:n:n], vals
}

// small reports whether n slots take two small objects, keys and values
// apart, rather than one large one: the size classes of small objects are
// finer than the whole pages of a large one just above largeObject (the
// step from 32 to 40 KiB alone is 25%, a whole growth step).
func (t *rowTable[P]) small(n int) bool {
	var zero P
	return t.words(n)*8 > largeObject && n*max(8, t.stride*int(unsafe.Sizeof(zero))) <= largeObject
}

// words is the size of an allocation of n slots, in 8-byte words: the
// keys, rounded up to 64 bytes, then the values.
func (t *rowTable[P]) words(n int) int {
	var zero P
	return (n+7)&^7 + (n*t.stride*int(unsafe.Sizeof(zero))+7)/8
}

// slots is how many slots an allocation of w words holds.
func (t *rowTable[P]) slots(w int) int {
	var zero P
	n := w * 8 / (8 + t.stride*int(unsafe.Sizeof(zero)))
	for t.words(n) > w {
		n--
	}
	return n
}

// extend adds pad slots at the end, for a run that reached the last slot
// (hashes crowding the top of the range; rare at random).
func (t *rowTable[P]) extend() {
	n := len(t.keys) + max(tablePad, len(t.keys)/16)
	keys, vals := t.alloc(n)
	copy(keys, t.keys)
	copy(vals, t.vals)
	t.keys, t.vals = keys, vals
}
