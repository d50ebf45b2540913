package mf

// keyIndex maps a batch's ids to their positions. For tables up to
// denseIndexMax keys it is an array stamped with the batch number, so a
// reset costs nothing; beyond, a map.
type keyIndex struct {
	stamp []uint32
	pos   []int32
	cur   uint32
	m     map[uint64]int32
}

const denseIndexMax = 1 << 24

func newKeyIndex(size uint64) keyIndex {
	if size > 0 && size <= denseIndexMax {
		return keyIndex{stamp: make([]uint32, size), pos: make([]int32, size), cur: 1}
	}
	return keyIndex{m: map[uint64]int32{}}
}

func (x *keyIndex) reset() {
	if x.m != nil {
		clear(x.m)
		return
	}
	x.cur++
	if x.cur == 0 { // wrapped: old stamps could collide
		clear(x.stamp)
		x.cur = 1
	}
}

func (x *keyIndex) get(k uint64) (int32, bool) {
	if x.m != nil {
		p, ok := x.m[k]
		return p, ok
	}
	if k < uint64(len(x.stamp)) && x.stamp[k] == x.cur {
		return x.pos[k], true
	}
	return 0, false
}

// put indexes k; callers check k against the table size first.
func (x *keyIndex) put(k uint64, p int32) {
	if x.m != nil {
		x.m[k] = p
		return
	}
	x.stamp[k], x.pos[k] = x.cur, p
}
