package kvstore

import "slices"

// sparse keeps the keys ever written in 16 stripes, each an ordered
// linear-probing hash table with the values inline beside the keys
// (rowTable): a lookup reads one run of 8-byte hashes and then the row at
// the same slot, with no row index in between, and a key of width 1
// float32 costs 14-16 bytes (12 per slot at a load of 0.74-0.92; see
// TestSparseBytesPerKeySweep). For uint64 keys this is several times
// faster than a Go map. Stripes are chosen by stripeOf, each guarded by
// its own lock in st; no key is ever removed.
type sparse[T float] struct {
	storeBase
	parts [numStripes]rowTable[T]
	st    stripes
}

func newSparse[T float](b storeBase) *sparse[T] {
	s := &sparse[T]{storeBase: b}
	for i := range s.parts {
		// Stripes receive about equal shares of the keys; offsetting their
		// growth steps evenly keeps them from all growing at one key count.
		s.parts[i] = newRowTable[T](b.width, float64(i)/numStripes)
	}
	return s
}

// stripeOf spreads keys over stripes by a multiplicative hash, so that
// hash-partitioned shards (keys congruent mod n) still use every stripe.
// The keys of a stripe agree on the top bits of this product, so a
// stripe's table hashes with another multiplier (hashKey).
func stripeOf(key uint64) uint64 { return (key * 0x9e3779b97f4a7c15) >> (64 - stripeBits) }

func (s *sparse[T]) mask(keys []uint64) uint64 {
	var m uint64
	for _, k := range keys {
		m |= 1 << stripeOf(k)
	}
	return m
}

func (s *sparse[T]) Len() int {
	s.st.rlock(allStripes)
	n := 0
	for i := range s.parts {
		n += s.parts[i].n
	}
	s.st.runlock(allStripes)
	return n
}

func (s *sparse[T]) Get(keys []uint64, out []float64) {
	w := s.width
	out = out[:len(keys)*w]
	m := s.mask(keys)
	s.st.rlock(m)
	for i, k := range keys {
		if !s.owns(k) {
			continue
		}
		t := &s.parts[stripeOf(k)]
		h := hashKey(k)
		j := t.seek(h)
		if w == 1 {
			if t.keys[j] == h {
				out[i] = float64(t.vals[j])
			} else {
				out[i] = s.initValue(k, 0)
			}
			continue
		}
		o := out[i*w:][:w]
		if t.keys[j] == h {
			for c, v := range t.row(j) {
				o[c] = float64(v)
			}
		} else if s.init.IsZero() {
			clear(o)
		} else {
			for c := range o {
				o[c] = s.initValue(k, c)
			}
		}
	}
	s.st.runlock(m)
}

// initValue is column c of an absent key, as it reads once written.
func (s *sparse[T]) initValue(k uint64, c int) float64 {
	if s.init.IsZero() {
		return 0
	}
	return float64(T(s.init.Value(k, c)))
}

// insertRow inserts key k (hash h, absent; seek gave j) into t with its
// Init values and returns its slot.
func (s *sparse[T]) insertRow(t *rowTable[T], j int, k, h uint64) int {
	j = t.insert(j, h)
	row := t.row(j)
	if s.init.IsZero() {
		clear(row)
	} else {
		for c := range row {
			row[c] = T(s.init.Value(k, c))
		}
	}
	return j
}

func (s *sparse[T]) Add(keys []uint64, deltas []float64) {
	w := s.width
	deltas = deltas[:len(keys)*w]
	m := s.mask(keys)
	s.st.lock(m)
	for i, k := range keys {
		if !s.owns(k) {
			continue
		}
		t := &s.parts[stripeOf(k)]
		h := hashKey(k)
		j := t.seek(h)
		if t.keys[j] != h {
			j = s.insertRow(t, j, k, h)
		}
		if w == 1 {
			t.vals[j] = T(float64(t.vals[j]) + deltas[i])
			continue
		}
		row := t.row(j)
		for c, d := range deltas[i*w:][:w] {
			row[c] = T(float64(row[c]) + d)
		}
	}
	s.st.unlock(m)
}

func (s *sparse[T]) Set(keys []uint64, vals []float64) {
	w := s.width
	vals = vals[:len(keys)*w]
	m := s.mask(keys)
	s.st.lock(m)
	for i, k := range keys {
		if !s.owns(k) {
			continue
		}
		t := &s.parts[stripeOf(k)]
		h := hashKey(k)
		j := t.seek(h)
		if t.keys[j] != h {
			j = s.insertRow(t, j, k, h)
		}
		row := t.row(j)
		for c, v := range vals[i*w:][:w] {
			row[c] = T(v)
		}
	}
	s.st.unlock(m)
}

func (s *sparse[T]) GetRange(first uint64, n int, out []float64) {
	rangeByKeys(first, n, s.width, out, s.Get)
}

func (s *sparse[T]) AddRange(first uint64, n int, deltas []float64) {
	rangeByKeys(first, n, s.width, deltas, s.Add)
}

func (s *sparse[T]) SetRange(first uint64, n int, vals []float64) {
	rangeByKeys(first, n, s.width, vals, s.Set)
}

// Range snapshots the held keys, sorts them, then visits each under its
// stripe's read lock only while copying, so fn may call back into s.
func (s *sparse[T]) Range(fn func(key uint64, vals []float64) bool) {
	var keys []uint64
	s.st.rlock(allStripes)
	for i := range s.parts {
		for _, h := range s.parts[i].keys {
			if h != 0 {
				keys = append(keys, unhashKey(h))
			}
		}
	}
	s.st.runlock(allStripes)
	slices.Sort(keys)
	w := s.width
	buf := make([]float64, w)
	for _, k := range keys {
		i := stripeOf(k)
		t := &s.parts[i]
		s.st[i].mu.RLock()
		for c, v := range t.row(t.seek(hashKey(k))) {
			buf[c] = float64(v)
		}
		s.st[i].mu.RUnlock()
		if !fn(k, buf) {
			return
		}
	}
}

// Scan pages through the stripes in order and each stripe's slots in hash
// order. A cursor is the last key of the previous page plus one (0: from
// the start), which names both its stripe and its hash, so a page goes on
// after that hash wherever inserts and rebuilds have since moved the
// entries: a scan that runs while keys are added visits every key it
// finds held at both ends once, never one twice. Keys are below MaxSize,
// so a cursor leaves the top bit free (scanLive's guest phase).
func (s *sparse[T]) Scan(cursor uint64, max int, keys []uint64, vals []float64) ([]uint64, []float64, uint64, bool, error) {
	stripe, after := uint64(0), uint64(0) // visit hashes > after
	if cursor != 0 {
		stripe, after = stripeOf(cursor-1), hashKey(cursor-1)
	}
	for ; stripe < numStripes; stripe, after = stripe+1, 0 {
		t := &s.parts[stripe]
		mu := &s.st[stripe].mu
		mu.RLock()
		i := 0
		if after != 0 {
			i = t.home(after)
		}
		for ; i < len(t.keys); i++ {
			h := t.keys[i]
			if h <= after { // empty, or at or before the cursor
				continue
			}
			if max--; max < 0 {
				mu.RUnlock()
				return keys, vals, cursor, true, nil
			}
			k := unhashKey(h)
			keys = append(keys, k)
			for _, v := range t.row(i) {
				vals = append(vals, float64(v))
			}
			cursor = k + 1
		}
		mu.RUnlock()
	}
	return keys, vals, 0, false, nil
}
