package kvstore

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

// rows returns the float64 rows and whether the fast path applies to keys.
func (d *dense[T]) rows(keys []uint64) ([]float64, bool) {
	vals, ok := any(d.vals).([]float64)
	if !ok || !d.contiguous {
		return nil, false
	}
	n := d.hi - d.lo
	for _, k := range keys {
		if k-d.lo >= n {
			return nil, false
		}
	}
	return vals, true
}

func (d *dense[T]) getRows(keys []uint64, out []float64) bool {
	vals, ok := d.rows(keys)
	if !ok {
		return false
	}
	w := uint64(d.width)
	out = out[:uint64(len(keys))*w]
	lk := d.walker(false)
	for i, k := range keys {
		l := k - d.lo
		lk.at(l)
		copy(out[uint64(i)*w:][:w], vals[l*w:][:w])
	}
	lk.release()
	return true
}

func (d *dense[T]) addRows(keys []uint64, deltas []float64) bool {
	vals, ok := d.rows(keys)
	if !ok {
		return false
	}
	w := uint64(d.width)
	deltas = deltas[:uint64(len(keys))*w]
	lk := d.walker(true)
	for i, k := range keys {
		l := k - d.lo
		lk.at(l)
		row := vals[l*w:][:w]
		src := deltas[uint64(i)*w:][:len(row)]
		for c := range row {
			row[c] += src[c]
		}
	}
	lk.release()
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
