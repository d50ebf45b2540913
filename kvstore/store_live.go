package kvstore

import "math/bits"

// Row access for a live table's in-memory batches. A worker's batch of
// keys its slave owns is read and added under the move lock, whose holder
// already knows every key is held by the store it calls: these skip the
// per-key shard test of Get and Add where the store is a float64 dense
// array over a contiguous key range (the home shard of a range-partitioned
// table, or a dense guest store), and copy whole rows. Other stores take
// their ordinary Get and Add.

// rowStore is implemented by stores with a fast path for held keys.
type rowStore interface {
	// getRows reads keys into out like Get; it reports false (and does
	// nothing) when it has no fast path, or a key is not held.
	getRows(keys []uint64, out []float64) bool
	// addRows adds like Add, with the same report.
	addRows(keys []uint64, deltas []float64) bool
}

// rows returns the float64 rows and whether the fast path applies to
// keys; if so it also returns the stripes the keys fall in, as a mask
// over stripes first..first+63.
func (d *dense[T]) rows(keys []uint64) (vals []float64, first uint64, mask uint64, ok bool) {
	vals, ok = any(d.vals).([]float64)
	if !ok || !d.contiguous || len(keys) == 0 {
		return nil, 0, 0, false
	}
	n := d.hi - d.lo
	first = (keys[0] - d.lo) >> d.shift
	for _, k := range keys {
		l := k - d.lo
		if l >= n {
			return nil, 0, 0, false
		}
		st := l >> d.shift
		if st < first {
			// Shift the mask up to start at st (keys span < 64 stripes).
			if first-st >= 64 || mask<<(first-st)>>(first-st) != mask {
				return nil, 0, 0, false
			}
			mask <<= first - st
			first = st
		}
		if st-first >= 64 {
			return nil, 0, 0, false
		}
		mask |= 1 << (st - first)
	}
	return vals, first, mask, true
}

// lockStripes takes the stripes of mask (from first) in ascending order.
// Walkers hold one stripe at a time and release it before taking the
// next, so holding several here cannot deadlock with them, nor with
// another lockStripes (same order).
func (d *dense[T]) lockStripes(first, mask uint64, write bool) {
	for m := mask; m != 0; m &= m - 1 {
		l := &d.locks[first+uint64(bits.TrailingZeros64(m))]
		if write {
			l.Lock()
		} else {
			l.RLock()
		}
	}
}

func (d *dense[T]) unlockStripes(first, mask uint64, write bool) {
	for m := mask; m != 0; m &= m - 1 {
		l := &d.locks[first+uint64(bits.TrailingZeros64(m))]
		if write {
			l.Unlock()
		} else {
			l.RUnlock()
		}
	}
}

func (d *dense[T]) getRows(keys []uint64, out []float64) bool {
	vals, first, mask, ok := d.rows(keys)
	if !ok {
		return false
	}
	w := uint64(d.width)
	out = out[:uint64(len(keys))*w]
	d.lockStripes(first, mask, false)
	for i, k := range keys {
		l := k - d.lo
		copy(out[uint64(i)*w:][:w], vals[l*w:][:w])
	}
	d.unlockStripes(first, mask, false)
	return true
}

func (d *dense[T]) addRows(keys []uint64, deltas []float64) bool {
	vals, first, mask, ok := d.rows(keys)
	if !ok {
		return false
	}
	w := uint64(d.width)
	deltas = deltas[:uint64(len(keys))*w]
	d.lockStripes(first, mask, true)
	for i, k := range keys {
		l := k - d.lo
		row := vals[l*w:][:w]
		src := deltas[uint64(i)*w:][:len(row)]
		for c := range row {
			row[c] += src[c]
		}
	}
	d.unlockStripes(first, mask, true)
	return true
}

// getHeld is st.Get of keys st holds, by the fast path when it has one.
func getHeld(st Store, keys []uint64, out []float64) {
	if rs, ok := st.(rowStore); ok && rs.getRows(keys, out) {
		return
	}
	st.Get(keys, out)
}

// addHeld is st.Add of keys st holds, by the fast path when it has one.
func addHeld(st Store, keys []uint64, deltas []float64) {
	if rs, ok := st.(rowStore); ok && rs.addRows(keys, deltas) {
		return
	}
	st.Add(keys, deltas)
}
