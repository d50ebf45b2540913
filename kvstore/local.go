package kvstore

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// LockMode is how a LocalTable guards concurrent updates.
type LockMode int

const (
	ChunkLocks LockMode = iota // one mutex per chunk of chunkSize keys
	NoLocks                    // hogwild: no locks; each value read and written in one word, see addHogwild32
	GlobalLock                 // one mutex for the table
)

func (m LockMode) String() string {
	switch m {
	case ChunkLocks:
		return "chunk_locks"
	case NoLocks:
		return "no_locks"
	case GlobalLock:
		return "global_lock"
	}
	return fmt.Sprintf("LockMode(%d)", int(m))
}

// LocalTable is the in-memory model the workers of a `local` stage share
// on one slave. Dense tables are one slice over [0, Size) x Width of the
// table's dtype (float32 or float64), the fast path. A sparse spec is held by a sparse Store (its own striped
// locks; mode is then ignored and Values returns nil).
//
// With ChunkLocks each call takes every chunk lock it needs once: sorted
// keys are walked run by run; unsorted keys are first grouped by chunk
// (stably, by a counting sort when the table has few chunks for the
// batch's size, else by sorting) in a pooled scratch buffer, or, with 4
// keys or more per chunk, walked as they come while the call holds the
// whole table. Calls are atomic per chunk, not as a whole. Keys >= Size
// are a caller error and are skipped.
type LocalTable struct {
	spec      TableSpec
	mode      LockMode
	width     int
	chunkSize uint64
	div       chunkDiv
	// The values of a dense table, in its dtype: vals for float64, v32
	// for float32 (4 bytes per parameter, rounded as the KV-store's
	// float32 shards round: each sum once to float32).
	vals   []float64
	v32    []float32
	chunks []sync.Mutex
	// all is held exclusively by a call that walks keys of every chunk
	// (lockAllKeys) in place of every chunk lock, and shared by every
	// call that takes chunk locks.
	all     sync.RWMutex
	global  sync.Mutex
	sparse  Store
	scratch sync.Pool // *localScratch for grouping unsorted keys
}

// NewLocalTable returns a table initialized per spec.Init.
func NewLocalTable(spec TableSpec, mode LockMode, chunkSize int) (*LocalTable, error) {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	t, err := lockedTable(spec, mode, chunkSize)
	if err != nil {
		return nil, err
	}
	if spec.Storage == Sparse {
		dir, err := NewDirectory(spec, 1)
		if err != nil {
			return nil, err
		}
		t.sparse = NewStore(spec, dir, 0)
		return t, nil
	}
	if err := checkAlloc(fmt.Sprintf("table %q (%d keys x %d, in one slave's memory)", spec.Name, spec.Size, spec.Width), spec.Size, spec.Width, spec.elemBytes()); err != nil {
		return nil, err
	}
	n := int(spec.Size) * spec.Width
	if spec.DType == Float32 {
		t.v32 = make([]float32, n)
		holdDense(t.v32, 4)
	} else {
		t.vals = make([]float64, n)
		holdDense(t.vals, 8)
	}
	if init, _ := parseInit(spec.Init); !init.IsZero() {
		for k := range spec.Size {
			for c := range spec.Width {
				if i, v := int(k)*spec.Width+c, init.Value(k, c); t.v32 != nil {
					t.v32[i] = float32(v)
				} else {
					t.vals[i] = v
				}
			}
		}
	}
	t.makeLocks()
	return t, nil
}

// lockedTable is a table of spec without values, under mode.
func lockedTable(spec TableSpec, mode LockMode, chunkSize int) (*LocalTable, error) {
	if chunkSize < 1 {
		return nil, fmt.Errorf("%w: table %q: chunk size must be >= 1, got %d", ErrBadSpec, spec.Name, chunkSize)
	}
	if mode < ChunkLocks || mode > GlobalLock {
		return nil, fmt.Errorf("%w: table %q: unknown lock mode %d", ErrBadSpec, spec.Name, int(mode))
	}
	t := &LocalTable{spec: spec, mode: mode, width: spec.Width, chunkSize: uint64(chunkSize)}
	t.div = newChunkDiv(spec.Size, uint64(chunkSize))
	t.scratch.New = func() any { return new(localScratch) }
	return t, nil
}

// makeLocks allocates the chunk locks of a dense table (once its values
// are known to fit).
func (t *LocalTable) makeLocks() {
	if t.mode == ChunkLocks && t.sparse == nil {
		t.chunks = make([]sync.Mutex, (t.spec.Size+t.chunkSize-1)/t.chunkSize)
	}
}

// Relock returns a table holding t's values, not a copy, under another
// lock mode and chunk size (a model a stage retained, taken over by the
// next stage's kind); t must not be used after.
func (t *LocalTable) Relock(mode LockMode, chunkSize int) (*LocalTable, error) {
	n, err := lockedTable(t.spec, mode, chunkSize)
	if err != nil {
		return nil, err
	}
	n.vals, n.v32, n.sparse = t.vals, t.v32, t.sparse
	n.makeLocks()
	return n, nil
}

const maxInt = int(^uint(0) >> 1)

// Spec returns the table's spec with defaults.
func (t *LocalTable) Spec() TableSpec { return t.spec }

// Values returns a copy of a dense table's values (key k's at
// [k*Width, (k+1)*Width)), read without locks: for tests and dumps once
// the workers are done; nil if sparse. Callers that walk a large table
// read it by ranges (GetRange) instead.
func (t *LocalTable) Values() []float64 {
	if t.v32 != nil {
		out := make([]float64, len(t.v32))
		for i, v := range t.v32 {
			out[i] = float64(v)
		}
		return out
	}
	if t.vals == nil {
		return nil
	}
	return slices.Clone(t.vals)
}

// op is one of the per-key kernels.
type localOp int

const (
	opGet localOp = iota
	opAdd
	opSet
)

func (t *LocalTable) apply(op localOp, k uint64, v []float64) {
	if k >= t.spec.Size {
		return
	}
	if t.v32 != nil {
		applyRow(t.v32, t.width, op, k, v)
	} else {
		applyRow(t.vals, t.width, op, k, v)
	}
}

// applyRow is apply on values tv of rows of width w.
func applyRow[T float](tv []T, w int, op localOp, k uint64, v []float64) {
	if w == 1 { // the common case: no slicing, no loop
		switch op {
		case opGet:
			v[0] = float64(tv[k])
		case opAdd:
			tv[k] = T(float64(tv[k]) + v[0])
		case opSet:
			tv[k] = T(v[0])
		}
		return
	}
	spanVals(tv[int(k)*w:][:w], op, v)
}

// applyAtomic is apply without locks: every value is read with an atomic
// load and added by addHogwild32/64. Hogwild workers race on keys as in
// the paper (a vector of width > 1 is not updated as a whole).
func (t *LocalTable) applyAtomic(op localOp, k uint64, v []float64) {
	if k >= t.spec.Size {
		return
	}
	w := t.width
	for c := range w {
		t.atomic1(op, int(k)*w+c, &v[c])
	}
}

// atomic1 is applyAtomic on value i of the table and *v.
func (t *LocalTable) atomic1(op localOp, i int, v *float64) {
	if t.v32 != nil {
		p := (*uint32)(unsafe.Pointer(&t.v32[i]))
		switch op {
		case opGet:
			*v = float64(math.Float32frombits(atomic.LoadUint32(p)))
		case opSet:
			atomic.StoreUint32(p, math.Float32bits(float32(*v)))
		case opAdd:
			addHogwild32(p, *v)
		}
		return
	}
	p := (*uint64)(unsafe.Pointer(&t.vals[i]))
	switch op {
	case opGet:
		*v = math.Float64frombits(atomic.LoadUint64(p))
	case opSet:
		atomic.StoreUint64(p, math.Float64bits(*v))
	case opAdd:
		addHogwild64(p, *v)
	}
}

// addHogwild32 adds d to the float32 at p (rounded once to float32) for a
// hogwild worker: a plain load and store of the word, as Hogwild! does.
// Two workers adding to the same value at the same instant may lose one
// of the two adds; a locked compare-and-swap per value cost 5-6x a plain
// add (10 ns against 1.5-2 ns per key in cache) and a fifth of the
// kind's profile. Go's memory model keeps a racing word-sized access whole
// (a read sees some write, never a torn value). Under the race detector
// (tests) the add is the atomic loop instead, so that it reports only
// races that are bugs.
func addHogwild32(p *uint32, d float64) {
	if raceEnabled {
		addAtomic32(p, d)
		return
	}
	f := (*float32)(unsafe.Pointer(p))
	*f = float32(float64(*f) + d)
}

// addHogwild64 is addHogwild32 for a float64.
func addHogwild64(p *uint64, d float64) {
	if raceEnabled {
		addAtomic64(p, d)
		return
	}
	f := (*float64)(unsafe.Pointer(p))
	*f += d
}

// addAtomic32 adds d to the float32 at p, rounded once to float32.
func addAtomic32(p *uint32, d float64) {
	for {
		old := atomic.LoadUint32(p)
		if atomic.CompareAndSwapUint32(p, old, math.Float32bits(float32(float64(math.Float32frombits(old))+d))) {
			return
		}
	}
}

// addAtomic64 adds d to the float64 at p.
func addAtomic64(p *uint64, d float64) {
	for {
		old := atomic.LoadUint64(p)
		if atomic.CompareAndSwapUint64(p, old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// runAtomic is applyAtomic over keys of width 1 in one tight loop per op,
// so the loads of many keys are in flight at once.
func (t *LocalTable) runAtomic(op localOp, keys []uint64, vals []float64) {
	if t.v32 != nil {
		runAtomic32(t.v32, t.spec.Size, op, keys, vals)
	} else {
		runAtomic64(t.vals, t.spec.Size, op, keys, vals)
	}
}

func runAtomic32(tv []float32, size uint64, op localOp, keys []uint64, vals []float64) {
	vals = vals[:len(keys)]
	switch op {
	case opGet:
		for i, k := range keys {
			if k < size {
				vals[i] = float64(math.Float32frombits(atomic.LoadUint32((*uint32)(unsafe.Pointer(&tv[k])))))
			}
		}
	case opAdd:
		for i, k := range keys {
			if k < size {
				addHogwild32((*uint32)(unsafe.Pointer(&tv[k])), vals[i])
			}
		}
	case opSet:
		for i, k := range keys {
			if k < size {
				atomic.StoreUint32((*uint32)(unsafe.Pointer(&tv[k])), math.Float32bits(float32(vals[i])))
			}
		}
	}
}

func runAtomic64(tv []float64, size uint64, op localOp, keys []uint64, vals []float64) {
	vals = vals[:len(keys)]
	switch op {
	case opGet:
		for i, k := range keys {
			if k < size {
				vals[i] = math.Float64frombits(atomic.LoadUint64((*uint64)(unsafe.Pointer(&tv[k]))))
			}
		}
	case opAdd:
		for i, k := range keys {
			if k < size {
				addHogwild64((*uint64)(unsafe.Pointer(&tv[k])), vals[i])
			}
		}
	case opSet:
		for i, k := range keys {
			if k < size {
				atomic.StoreUint64((*uint64)(unsafe.Pointer(&tv[k])), math.Float64bits(vals[i]))
			}
		}
	}
}

func (t *LocalTable) do(op localOp, keys []uint64, vals []float64) {
	w := t.width
	vals = vals[:len(keys)*w]
	switch t.mode {
	case NoLocks:
		if w == 1 {
			t.runAtomic(op, keys, vals)
			return
		}
		for i, k := range keys {
			t.applyAtomic(op, k, vals[i*w:][:w])
		}
	case GlobalLock:
		t.global.Lock()
		t.run(op, keys, vals)
		t.global.Unlock()
	default:
		t.doChunked(op, keys, vals)
	}
}

// run applies op to keys in one tight loop per op (no per-key switch):
// this is the inner loop of every local stage's Get and Add.
func (t *LocalTable) run(op localOp, keys []uint64, vals []float64) {
	if t.v32 != nil {
		runVals(t.v32, t.width, t.spec.Size, op, keys, vals)
	} else {
		runVals(t.vals, t.width, t.spec.Size, op, keys, vals)
	}
}

func runVals[T float](tv []T, w int, size uint64, op localOp, keys []uint64, vals []float64) {
	if w == 1 {
		vals = vals[:len(keys)]
		switch op {
		case opGet:
			for i, k := range keys {
				if k < size {
					vals[i] = float64(tv[k])
				}
			}
		case opAdd:
			for i, k := range keys {
				if k < size {
					tv[k] = T(float64(tv[k]) + vals[i])
				}
			}
		case opSet:
			for i, k := range keys {
				if k < size {
					tv[k] = T(vals[i])
				}
			}
		}
		return
	}
	for i, k := range keys {
		if k < size {
			applyRow(tv, w, op, k, vals[i*w:][:w])
		}
	}
}

// chunkDiv divides keys by the chunk size without a divide instruction on
// the per-key paths (a 64-bit divide costs tens of cycles, as much as the
// key's add): by a shift when the size is a power of two (the default),
// else by a multiply-high with a magic number (Lemire's fastdiv, exact for
// keys and divisors below 2^32, which local tables' are). Larger tables
// with other sizes divide.
type chunkDiv struct {
	d     uint64
	shift uint   // < 64: d is 1 << shift
	magic uint64 // != 0: k / d is the high word of magic * k
}

func newChunkDiv(size, d uint64) chunkDiv {
	switch {
	case d&(d-1) == 0:
		return chunkDiv{d: d, shift: uint(bits.TrailingZeros64(d))}
	case size <= 1<<32 && d < 1<<32:
		return chunkDiv{d: d, shift: 64, magic: math.MaxUint64/d + 1}
	}
	return chunkDiv{d: d, shift: 64}
}

// of is k / d for k < the table's size.
func (c chunkDiv) of(k uint64) uint64 {
	switch {
	case c.shift < 64:
		return k >> c.shift
	case c.magic != 0:
		hi, _ := bits.Mul64(c.magic, k)
		return hi
	}
	return k / c.d
}

func (t *LocalTable) chunkOf(k uint64) uint64 {
	if k >= t.spec.Size {
		return uint64(len(t.chunks)) // sentinel: no lock, skipped by apply
	}
	return t.div.of(k)
}

// doChunked takes each chunk lock the keys need once. Sorted keys (what
// the client and range-like callers send) are cut into runs of one chunk
// by comparing each key with the run's chunk end, not by dividing every
// key; other orders (lr.sgd's batches, in first-seen order: sorting them
// costs the caller more than grouping them here) are grouped by chunk
// first.
func (t *LocalTable) doChunked(op localOp, keys []uint64, vals []float64) {
	w := t.width
	n := len(keys)
	for n > 0 && keys[n-1] >= t.spec.Size { // sorted keys put strays last
		n--
	}
	sorted := slices.IsSorted(keys[:n])
	if !sorted && len(keys) >= lockAllKeys*len(t.chunks) {
		// Keys in every chunk: hold the whole table (every chunk) and
		// walk the keys as they come, instead of grouping them by chunk.
		t.all.Lock()
		t.run(op, keys, vals)
		t.all.Unlock()
		return
	}
	t.all.RLock()
	defer t.all.RUnlock()
	if sorted {
		for i := 0; i < n; {
			c := keys[i] / t.chunkSize
			end := (c + 1) * t.chunkSize
			j := i + 1
			for j < n && keys[j] < end {
				j++
			}
			mu := &t.chunks[c]
			mu.Lock()
			t.run(op, keys[i:j], vals[i*w:j*w])
			mu.Unlock()
			i = j
		}
		return
	}
	sc := t.scratch.Get().(*localScratch)
	if len(t.chunks) <= 4*len(keys)+64 {
		t.byCounting(op, keys, vals, sc)
	} else {
		t.bySorting(op, keys, vals, sc)
	}
	t.scratch.Put(sc)
}

// lockAllKeys is the keys per chunk from which an unsorted call holds
// the whole table (LocalTable.all) rather than group its keys by chunk.
const lockAllKeys = 4

// localScratch is a call's pooled buffers for grouping unsorted keys.
type localScratch struct {
	order  []uint64
	counts []uint32
}

// byCounting groups keys by chunk with a counting sort, O(keys + chunks):
// for tables of few chunks relative to the batch (the default chunk size
// over an LR model) this costs a few passes over the keys, far less than
// sorting them.
func (t *LocalTable) byCounting(op localOp, keys []uint64, vals []float64, sc *localScratch) {
	nc := len(t.chunks)
	if cap(sc.counts) < nc+2 {
		sc.counts = make([]uint32, nc+2)
	}
	counts := sc.counts[:nc+2] // chunk c's start at counts[c+1] after the prefix sum; strays in chunk nc
	clear(counts)
	for _, k := range keys {
		counts[t.chunkOf(k)+1]++
	}
	for c := 1; c < len(counts); c++ {
		counts[c] += counts[c-1]
	}
	sc.order = grow(sc.order, len(keys))
	order := sc.order
	for i, k := range keys {
		c := t.chunkOf(k)
		order[counts[c]] = uint64(i)
		counts[c]++
	}
	// counts[c] is now chunk c's end.
	start := uint32(0)
	for c := range nc {
		end := counts[c]
		if end == start {
			continue
		}
		mu := &t.chunks[c]
		mu.Lock()
		t.runOrder(op, keys, vals, order[start:end])
		mu.Unlock()
		start = end
	}
}

// runOrder is run over keys[p] for the positions p in order (every key
// in range): one tight loop per op for width 1, as run.
func (t *LocalTable) runOrder(op localOp, keys []uint64, vals []float64, order []uint64) {
	if t.v32 != nil {
		runOrderVals(t.v32, t.width, op, keys, vals, order)
	} else {
		runOrderVals(t.vals, t.width, op, keys, vals, order)
	}
}

func runOrderVals[T float](tv []T, w int, op localOp, keys []uint64, vals []float64, order []uint64) {
	if w != 1 {
		for _, p := range order {
			applyRow(tv, w, op, keys[p], vals[int(p)*w:][:w])
		}
		return
	}
	switch op {
	case opGet:
		for _, p := range order {
			vals[p] = float64(tv[keys[p]])
		}
	case opAdd:
		for _, p := range order {
			tv[keys[p]] = T(float64(tv[keys[p]]) + vals[p])
		}
	case opSet:
		for _, p := range order {
			tv[keys[p]] = T(vals[p])
		}
	}
}

// bySorting groups keys by chunk with one sort of packed (chunk, position)
// words: local tables hold at most 2^31 values, so both halves fit 32 bits.
func (t *LocalTable) bySorting(op localOp, keys []uint64, vals []float64, sc *localScratch) {
	w := t.width
	sc.order = grow(sc.order, len(keys))
	order := sc.order
	for i, k := range keys {
		order[i] = t.chunkOf(k)<<32 | uint64(i)
	}
	slices.Sort(order)
	for i := 0; i < len(order); {
		c := order[i] >> 32
		j := i + 1
		for j < len(order) && order[j]>>32 == c {
			j++
		}
		if c < uint64(len(t.chunks)) {
			mu := &t.chunks[c]
			mu.Lock()
			for _, p := range order[i:j] {
				x := int(uint32(p))
				t.apply(op, keys[x], vals[x*w:][:w])
			}
			mu.Unlock()
		}
		i = j
	}
}

// Get copies the values of keys into out (len(keys)*Width).
func (t *LocalTable) Get(keys []uint64, out []float64) {
	if t.sparse != nil {
		t.sparse.Get(keys, out)
		return
	}
	t.do(opGet, keys, out)
}

// Add adds deltas (len(keys)*Width) to keys' values.
func (t *LocalTable) Add(keys []uint64, deltas []float64) {
	if t.sparse != nil {
		t.sparse.Add(keys, deltas)
		return
	}
	t.do(opAdd, keys, deltas)
}

// Set overwrites keys' values.
func (t *LocalTable) Set(keys []uint64, vals []float64) {
	if t.sparse != nil {
		t.sparse.Set(keys, vals)
		return
	}
	t.do(opSet, keys, vals)
}

// GetRange copies the values of keys first..first+n-1 into out.
func (t *LocalTable) GetRange(first uint64, n int, out []float64) {
	t.doRange(opGet, first, n, out)
}

// SetRange overwrites the values of keys first..first+n-1.
func (t *LocalTable) SetRange(first uint64, n int, vals []float64) {
	t.doRange(opSet, first, n, vals)
}

// AddRange adds deltas to keys first..first+n-1.
func (t *LocalTable) AddRange(first uint64, n int, deltas []float64) {
	t.doRange(opAdd, first, n, deltas)
}

func (t *LocalTable) doRange(op localOp, first uint64, n int, vals []float64) {
	if t.sparse != nil {
		switch op {
		case opGet:
			t.sparse.GetRange(first, n, vals)
		case opAdd:
			t.sparse.AddRange(first, n, vals)
		case opSet:
			t.sparse.SetRange(first, n, vals)
		}
		return
	}
	if n <= 0 || first >= t.spec.Size {
		return
	}
	n = int(min(uint64(n), t.spec.Size-first))
	w := t.width
	chunked := t.mode == ChunkLocks
	if t.mode == GlobalLock {
		t.global.Lock()
		defer t.global.Unlock()
	}
	if chunked {
		t.all.RLock()
		defer t.all.RUnlock()
	}
	for k, end := first, first+uint64(n); k < end; {
		c := k / t.chunkSize
		stop := min(end, (c+1)*t.chunkSize)
		lo, hi := int(k)*w, int(stop)*w
		v := vals[int(k-first)*w:][:hi-lo]
		if chunked {
			t.chunks[c].Lock()
		}
		if t.v32 != nil {
			spanVals(t.v32[lo:hi], op, v)
		} else {
			spanVals(t.vals[lo:hi], op, v)
		}
		if chunked {
			t.chunks[c].Unlock()
		}
		k = stop
	}
}

// spanVals applies op to a span of values row and v, value by value.
func spanVals[T float](row []T, op localOp, v []float64) {
	v = v[:len(row)]
	switch op {
	case opGet:
		for i, x := range row {
			v[i] = float64(x)
		}
	case opAdd:
		for i := range row {
			row[i] = T(float64(row[i]) + v[i])
		}
	case opSet:
		for i := range row {
			row[i] = T(v[i])
		}
	}
}
