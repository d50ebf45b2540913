package kvstore

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"sync"
	"unsafe"
)

// Store is one shard of a table: the values of the keys a Directory
// assigns to that shard. All methods are goroutine-safe; concurrent Adds to
// one key are never lost.
//
// Keys outside the shard (not owned by it per the Directory, or >= Size)
// are a programming error: the client never sends them. A Store skips them
// without touching its state; Get leaves their out values untouched.
type Store interface {
	Spec() TableSpec
	Get(keys []uint64, out []float64)            // out has len(keys)*Width; keys never written read as the Init value
	Add(keys []uint64, deltas []float64)         // deltas len(keys)*Width
	GetRange(first uint64, n int, out []float64) // keys first..first+n-1
	AddRange(first uint64, n int, deltas []float64)
	SetRange(first uint64, n int, vals []float64)   // overwrite keys first..first+n-1
	Set(keys []uint64, vals []float64)              // overwrite (for model load/transfer)
	Range(fn func(key uint64, vals []float64) bool) // held keys in ascending order; vals valid only during the call
	Len() int
}

// NewStore returns shard shard of spec placed by dir: a dense array over
// the shard's initial keys, or a sparse map of the keys ever written,
// storing float32 or float64. Values cross the API as float64. spec is
// completed with its defaults; it should have passed Validate.
//
// Concurrency: dense shards lock stripes of consecutive local indexes
// (about 16k values each) one at a time as a call walks its keys, and
// read and add plainly inside (see dense). Sparse shards split keys into 16 stripes by a hash, each with its
// own RWMutex: a call first collects the stripes it touches into a bitmask,
// then takes each of those locks once, in stripe order (so calls never
// deadlock), does all its work, and releases them.
func NewStore(spec TableSpec, dir Directory, shard int) Store {
	spec = spec.WithDefaults()
	init, _ := parseInit(spec.Init)
	b := storeBase{spec: spec, width: spec.Width, init: init, dir: dir, shard: shard}
	b.lo, b.hi, b.contiguous = dir.Bounds(shard)
	if hd, ok := dir.(*hashDirectory); ok {
		b.hash, b.hashN = true, hd.n
	}
	switch {
	case spec.Storage == Sparse && spec.DType == Float32:
		return newSparse[float32](b)
	case spec.Storage == Sparse:
		return newSparse[float64](b)
	case spec.DType == Float32:
		return newDense[float32](b)
	default:
		return newDense[float64](b)
	}
}

const (
	stripeBits = 4
	numStripes = 1 << stripeBits
)

type float interface{ ~float32 | ~float64 }

type stripe struct {
	mu sync.RWMutex
	_  [40]byte // keep stripes on separate cache lines
}

type stripes [numStripes]stripe

const allStripes = 1<<numStripes - 1

func (s *stripes) lock(mask uint64) {
	for m := mask; m != 0; m &= m - 1 {
		s[bits.TrailingZeros64(m)].mu.Lock()
	}
}

func (s *stripes) unlock(mask uint64) {
	for m := mask; m != 0; m &= m - 1 {
		s[bits.TrailingZeros64(m)].mu.Unlock()
	}
}

func (s *stripes) rlock(mask uint64) {
	for m := mask; m != 0; m &= m - 1 {
		s[bits.TrailingZeros64(m)].mu.RLock()
	}
}

func (s *stripes) runlock(mask uint64) {
	for m := mask; m != 0; m &= m - 1 {
		s[bits.TrailingZeros64(m)].mu.RUnlock()
	}
}

// storeBase holds what dense and sparse stores share: the spec and the
// shard's place in the directory.
type storeBase struct {
	spec       TableSpec
	width      int
	init       initRule
	dir        Directory
	shard      int
	lo, hi     uint64 // bounds when contiguous
	contiguous bool
	hash       bool // dir is the static hash directory with hashN shards
	hashN      uint64
}

func (b *storeBase) Spec() TableSpec { return b.spec }

// owns reports whether key belongs to this shard.
func (b *storeBase) owns(key uint64) bool {
	switch {
	case b.contiguous:
		return key-b.lo < b.hi-b.lo
	case b.hash:
		return key < b.spec.Size && key%b.hashN == uint64(b.shard)
	default:
		return key < b.spec.Size && b.dir.Owner(key) == b.shard
	}
}

// local returns key's local index and whether the shard owns key.
func (b *storeBase) local(key uint64) (uint64, bool) {
	switch {
	case b.contiguous:
		l := key - b.lo
		return l, l < b.hi-b.lo
	case b.hash:
		return key / b.hashN, key < b.spec.Size && key%b.hashN == uint64(b.shard)
	default:
		if key >= b.spec.Size || b.dir.Owner(key) != b.shard {
			return 0, false
		}
		return b.dir.LocalIndex(key), true
	}
}

// dense keeps the shard's initial keys in one array indexed by LocalIndex,
// guarded by stripe locks: stripe i covers local indexes [i<<shift,
// (i+1)<<shift), about stripeVals values whatever the width. Every call
// walks its keys in order and holds one stripe lock at a time, switching
// when a key falls in another stripe; inside, values are read and added
// with plain loads and stores. Sorted keys (the client sends them sorted)
// and range calls therefore take one lock per stripe they touch, not one
// locked instruction per value, which is what bounded bulk pushes when
// every value was added by a compare-and-swap loop. Readers take the read
// side, so workers reading hot keys do not exclude each other; a vector of
// width > 1 is read and written whole within its stripe, so a Get never
// sees half of a concurrent Add to one key.
type dense[T float] struct {
	storeBase
	n     uint64 // keys held
	vals  []T    // n*width, read and written under the stripe's lock
	shift uint   // log2 of keys per stripe
	locks []stripeLock
}

// stripeVals is about how many values one stripe lock covers: large enough
// that range calls pay a lock per several kilobytes, small enough that a
// writer holds it for a few microseconds at most.
const stripeVals = 16384

// stripeLock is padded to a cache line so that neighbouring stripes taken
// by different cores do not share one.
type stripeLock struct {
	sync.RWMutex
	_ [64 - 24]byte
}

func newDense[T float](b storeBase) *dense[T] {
	n := b.dir.ShardKeys(b.shard)
	d := &dense[T]{storeBase: b, n: n, vals: make([]T, n*uint64(b.width))}
	holdDense(d.vals, b.spec.elemBytes())
	keys := uint64(max(1, stripeVals/b.width))
	d.shift = uint(bits.Len64(keys) - 1)
	d.locks = make([]stripeLock, (n>>d.shift)+1)
	if !b.init.IsZero() {
		d.eachKey(func(l, key uint64) {
			row := d.vals[l*uint64(b.width):][:b.width]
			for c := range row {
				row[c] = T(b.init.Value(key, c))
			}
		})
	}
	return d
}

// walker holds at most one stripe lock of a dense store while a call walks
// its keys; the zero value holds none. A call whose keys would switch
// stripes more often than there are stripes (see lockAll: a batch's keys
// as it met them, rows of sorted features one after another) takes every
// stripe at once instead, in order, and holds them to its end: walking
// them one stripe at a time would pay a lock and an unlock per switch,
// where this is one of each per stripe. Sorted keys switch at most once
// per stripe anyway. Taking them in order, while every other walker holds
// one at a time, cannot deadlock.
type walker struct {
	locks []stripeLock
	shift uint
	cur   *stripeLock
	write bool
	all   bool // holds every stripe
}

// lockSample is how many of a call's first keys lockAll looks at.
const lockSample = 64

// lockAll reports whether walking keys one stripe at a time would likely
// switch stripes more often than there are stripes. Keys that never step
// back to a lower stripe switch at most once per stripe; otherwise the
// switches among the first lockSample keys, scaled to the call's length,
// estimate the walk's. (Local indexes follow key order in the range and
// hash directories, see eachKey; elsewhere a wrong guess only costs
// speed.)
func (d *dense[T]) lockAll(keys []uint64) bool {
	if len(d.locks) < 2 || len(keys) <= len(d.locks) {
		return false
	}
	sample := keys[:min(len(keys), lockSample)]
	switches, back := 0, false
	prev := uint64(math.MaxUint64)
	for _, k := range sample {
		l, ok := d.local(k)
		if !ok {
			continue
		}
		if s := l >> d.shift; s != prev {
			back = back || (s < prev && prev != math.MaxUint64)
			switches++
			prev = s
		}
	}
	return back && switches*len(keys) > len(d.locks)*len(sample)
}

func (d *dense[T]) walker(write bool, keys []uint64) walker {
	w := walker{locks: d.locks, shift: d.shift, write: write}
	if d.lockAll(keys) {
		for i := range d.locks {
			if write {
				d.locks[i].Lock()
			} else {
				d.locks[i].RLock()
			}
		}
		// Every index maps to stripe 0 (a shift by 64 is 0), which the
		// walker holds: at never switches.
		w.all, w.shift, w.cur = true, 64, &d.locks[0]
	}
	return w
}

// at makes sure the walker holds the stripe of local index l. It is small
// enough to inline; switching stripes is the call.
func (w *walker) at(l uint64) {
	if m := &w.locks[l>>w.shift]; m != w.cur {
		w.move(m)
	}
}

func (w *walker) move(m *stripeLock) {
	w.release()
	if w.write {
		m.Lock()
	} else {
		m.RLock()
	}
	w.cur = m
}

func (w *walker) release() {
	if w.all {
		for i := range w.locks {
			if w.write {
				w.locks[i].Unlock()
			} else {
				w.locks[i].RUnlock()
			}
		}
		w.all, w.cur = false, nil
		return
	}
	if w.cur == nil {
		return
	}
	if w.write {
		w.cur.Unlock()
	} else {
		w.cur.RUnlock()
	}
	w.cur = nil
}

// stripeEnd is the first local index after l's stripe.
func (d *dense[T]) stripeEnd(l uint64) uint64 { return (l>>d.shift + 1) << d.shift }

// eachKey visits (local index, key) of every held key in ascending key order.
func (d *dense[T]) eachKey(fn func(local, key uint64)) {
	switch {
	case d.contiguous:
		for l := range d.n {
			fn(l, d.lo+l)
		}
	default:
		if ka, ok := d.dir.(keyAtter); ok {
			for l := range d.n { // LocalIndex is monotone in the key for hash
				fn(l, ka.KeyAt(d.shard, l))
			}
			return
		}
		// A foreign directory: scan the key space (slow, not a hot path).
		for k := range d.spec.Size {
			if d.dir.Owner(k) == d.shard {
				fn(d.dir.LocalIndex(k), k)
			}
		}
	}
}

func (d *dense[T]) Len() int { return int(d.n) }

func (d *dense[T]) Get(keys []uint64, out []float64) {
	w := d.width
	out = out[:len(keys)*w]
	lk := d.walker(false, keys)
	if w == 1 {
		for i, k := range keys {
			if l, ok := d.local(k); ok {
				lk.at(l)
				out[i] = float64(d.vals[l])
			}
		}
		lk.release()
		return
	}
	for i, k := range keys {
		l, ok := d.local(k)
		if !ok {
			continue
		}
		lk.at(l)
		row := d.vals[l*uint64(w):][:w]
		o := out[i*w:][:w]
		for c, v := range row {
			o[c] = float64(v)
		}
	}
	lk.release()
}

func (d *dense[T]) Add(keys []uint64, deltas []float64) {
	w := d.width
	deltas = deltas[:len(keys)*w]
	lk := d.walker(true, keys)
	if w == 1 {
		for i, k := range keys {
			if l, ok := d.local(k); ok {
				lk.at(l)
				d.vals[l] = T(float64(d.vals[l]) + deltas[i])
			}
		}
		lk.release()
		return
	}
	for i, k := range keys {
		l, ok := d.local(k)
		if !ok {
			continue
		}
		lk.at(l)
		row := d.vals[l*uint64(w):][:w]
		for c, dv := range deltas[i*w:][:w] {
			row[c] = T(float64(row[c]) + dv)
		}
	}
	lk.release()
}

func (d *dense[T]) Set(keys []uint64, vals []float64) {
	w := d.width
	vals = vals[:len(keys)*w]
	lk := d.walker(true, keys)
	for i, k := range keys {
		l, ok := d.local(k)
		if !ok {
			continue
		}
		lk.at(l)
		row := d.vals[l*uint64(w):][:w]
		for c, v := range vals[i*w:][:w] {
			row[c] = T(v)
		}
	}
	lk.release()
}

// inRange reports whether [first, first+n) lies inside a contiguous shard.
func (d *dense[T]) inRange(first uint64, n int) bool {
	return d.contiguous && n >= 0 && first >= d.lo && first <= d.hi && uint64(n) <= d.hi-first
}

// spans calls fn for each stripe's part of local indexes [lo, lo+n), with
// that stripe locked, and the part's values dst and its offset (in values)
// from lo.
func (d *dense[T]) spans(lo uint64, n int, write bool, fn func(dst []T, off int)) {
	w := uint64(d.width)
	for l, end := lo, lo+uint64(n); l < end; {
		stop := min(end, d.stripeEnd(l))
		m := &d.locks[l>>d.shift]
		if write {
			m.Lock()
		} else {
			m.RLock()
		}
		fn(d.vals[l*w:stop*w], int((l-lo)*w))
		if write {
			m.Unlock()
		} else {
			m.RUnlock()
		}
		l = stop
	}
}

func (d *dense[T]) GetRange(first uint64, n int, out []float64) {
	if !d.inRange(first, n) {
		d.rangeSlow(first, n, out, d.Get)
		return
	}
	out = out[:n*d.width]
	d.spans(first-d.lo, n, false, func(src []T, off int) {
		o := out[off:][:len(src)]
		for i, v := range src {
			o[i] = float64(v)
		}
	})
}

func (d *dense[T]) SetRange(first uint64, n int, vals []float64) {
	if !d.inRange(first, n) {
		d.rangeSlow(first, n, vals, d.Set)
		return
	}
	vals = vals[:n*d.width]
	d.spans(first-d.lo, n, true, func(dst []T, off int) {
		v := vals[off:][:len(dst)]
		for i := range dst {
			dst[i] = T(v[i])
		}
	})
}

func (d *dense[T]) AddRange(first uint64, n int, deltas []float64) {
	if !d.inRange(first, n) {
		d.rangeSlow(first, n, deltas, d.Add)
		return
	}
	deltas = deltas[:n*d.width]
	d.spans(first-d.lo, n, true, func(dst []T, off int) {
		v := deltas[off:][:len(dst)]
		for i := range dst {
			dst[i] = T(float64(dst[i]) + v[i])
		}
	})
}

// rangeSlow serves a range op key by key in batches (hash shards, or a
// range partly outside the shard).
func (d *dense[T]) rangeSlow(first uint64, n int, vals []float64, op func([]uint64, []float64)) {
	rangeByKeys(first, n, d.width, vals, op)
}

func rangeByKeys(first uint64, n int, width int, vals []float64, op func([]uint64, []float64)) {
	var buf [256]uint64
	for n > 0 {
		m := min(n, len(buf))
		for i := range m {
			buf[i] = first + uint64(i)
		}
		op(buf[:m], vals[:m*width])
		vals = vals[m*width:]
		first += uint64(m)
		n -= m
	}
}

// Range copies each key's row under its stripe's read lock and calls fn
// with no lock held, so fn may call back into d.
func (d *dense[T]) Range(fn func(key uint64, vals []float64) bool) {
	w := uint64(d.width)
	buf := make([]float64, w)
	stop := false
	d.eachKey(func(l, key uint64) {
		if stop {
			return
		}
		m := &d.locks[l>>d.shift]
		m.RLock()
		for c, v := range d.vals[l*w : (l+1)*w] {
			buf[c] = float64(v)
		}
		m.RUnlock()
		stop = !fn(key, buf)
	})
}

// appendRows appends the values of local indexes [lo, hi) to vals, each
// stripe read under its lock (for Scan).
func (d *dense[T]) appendRows(vals []float64, lo, hi uint64) []float64 {
	if lo >= hi {
		return vals
	}
	d.spans(lo, int(hi-lo), false, func(src []T, _ int) {
		for _, v := range src {
			vals = append(vals, float64(v))
		}
	})
	return vals
}

// rawAppender is implemented by stores that can encode values straight
// from their storage in their own dtype, little-endian, as the codec sends
// them (no float64 round trip).
type rawAppender interface {
	AppendRaw(dst []byte, keys []uint64) []byte
	AppendRangeRaw(dst []byte, first uint64, n int) ([]byte, bool)
}

// putValues writes src little-endian in its own dtype into dst, which
// holds len(src) values.
func putValues[T float](dst []byte, src []T) {
	var zero T
	if unsafe.Sizeof(zero) == 4 {
		putFloat32s(dst, src)
		return
	}
	dst = dst[:8*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint64(dst[8*i:], math.Float64bits(float64(v)))
	}
}

// stripe makes lk hold local index l's stripe and returns the local
// indexes the walker now holds, [base, end): l's stripe, or the whole
// shard when lk holds every stripe.
func (d *dense[T]) stripe(lk *walker, l uint64) (base, end uint64) {
	lk.at(l)
	if lk.all {
		return 0, d.hi - d.lo
	}
	base = l >> lk.shift << lk.shift
	return base, min(base+1<<lk.shift, d.hi-d.lo)
}

func (d *dense[T]) AppendRaw(dst []byte, keys []uint64) []byte {
	w := uint64(d.width)
	var zero T
	size := int(unsafe.Sizeof(zero))
	rowBytes := int(w) * size
	off := len(dst)
	dst = slices.Grow(dst, len(keys)*rowBytes)[:off+len(keys)*rowBytes]
	lk := d.walker(false, keys)
	if v32, ok := any(d.vals).([]float32); ok && w == 1 && d.contiguous {
		// One float32 per key of a range shard (a bulk pull of scalars):
		// a stripe's run of keys at a time, as AddRaw.
		o := dst[off:]
		lo, n := d.lo, d.hi-d.lo
		for i := 0; i < len(keys); {
			l := keys[i] - lo
			if l >= n {
				clear(o[4*i : 4*i+4])
				i++
				continue
			}
			base, end := d.stripe(&lk, l)
			vs := v32[base:end]
			for ; i < len(keys); i++ {
				j := keys[i] - lo - base
				if j >= uint64(len(vs)) {
					break
				}
				binary.LittleEndian.PutUint32(o[4*i:], math.Float32bits(vs[j]))
			}
		}
		lk.release()
		return dst
	}
	if w == 1 { // one value per key: no per-row call
		o := dst[off:]
		for i, k := range keys {
			l, ok := d.local(k)
			switch {
			case !ok:
				clear(o[i*size : (i+1)*size])
			case size == 4:
				lk.at(l)
				binary.LittleEndian.PutUint32(o[4*i:], math.Float32bits(float32(d.vals[l])))
			default:
				lk.at(l)
				binary.LittleEndian.PutUint64(o[8*i:], math.Float64bits(float64(d.vals[l])))
			}
		}
		lk.release()
		return dst
	}
	for i, k := range keys {
		out := dst[off+i*rowBytes:][:rowBytes]
		l, ok := d.local(k)
		if !ok {
			clear(out)
			continue
		}
		lk.at(l)
		putValues(out, d.vals[l*w:(l+1)*w])
	}
	lk.release()
	return dst
}

func (d *dense[T]) AppendRangeRaw(dst []byte, first uint64, n int) ([]byte, bool) {
	if !d.inRange(first, n) {
		return dst, false
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	off := len(dst)
	total := n * d.width * size
	dst = slices.Grow(dst, total)[:off+total]
	d.spans(first-d.lo, n, false, func(src []T, at int) {
		putValues(dst[off+at*size:], src)
	})
	return dst, true
}

// rawAdder is implemented by stores that add values straight from their
// wire encoding (no float64 buffer in between).
type rawAdder interface {
	AddRangeRaw(first uint64, n int, raw []byte, dtype DType) bool
	// AddRaw adds len(keys) rows of float32 deltas in raw; false when it
	// cannot (another dtype: the caller converts).
	AddRaw(keys []uint64, raw []byte, dtype DType) bool
}

// AddRaw is Add of float32 deltas as they came on the wire, decoded and
// added in one pass. The sum is the same as Add's: a float32 store's
// float64 sum rounded to float32 is the float32 sum.
func (d *dense[T]) AddRaw(keys []uint64, raw []byte, dtype DType) bool {
	if dtype != Float32 {
		return false
	}
	w := d.width
	raw = raw[:4*len(keys)*w]
	lk := d.walker(true, keys)
	defer lk.release()
	v32, is32 := any(d.vals).([]float32)
	if w == 1 && is32 && d.contiguous {
		// One float32 per key of a range shard (a bulk push of scalars),
		// a stripe at a time: the walker is asked once per run of keys
		// in one stripe (each stripe once, for sorted keys), and the
		// run's loop has one unsigned compare per key for both ends.
		lo, n := d.lo, d.hi-d.lo
		for i := 0; i < len(keys); {
			l := keys[i] - lo
			if l >= n {
				i++
				continue
			}
			base, end := d.stripe(&lk, l)
			vs := v32[base:end]
			for ; i < len(keys); i++ {
				j := keys[i] - lo - base
				if j >= uint64(len(vs)) {
					break
				}
				vs[j] += math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		}
		return true
	}
	if w == 1 {
		for i, k := range keys {
			if l, ok := d.local(k); ok {
				lk.at(l)
				d.vals[l] = T(float64(d.vals[l]) + float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))))
			}
		}
		return true
	}
	for i, k := range keys {
		l, ok := d.local(k)
		if !ok {
			continue
		}
		lk.at(l)
		if is32 {
			addFloat32sTo32(v32[l*uint64(w):][:w], raw[4*i*w:])
		} else {
			addFloat32s(d.vals[l*uint64(w):][:w], raw[4*i*w:])
		}
	}
	return true
}

func (d *dense[T]) AddRangeRaw(first uint64, n int, raw []byte, dtype DType) bool {
	if !d.inRange(first, n) {
		return false
	}
	if dtype == Float32 {
		raw = raw[:4*n*d.width]
		d.spans(first-d.lo, n, true, func(dst []T, at int) {
			r := raw[4*at:][:4*len(dst)]
			if d32, ok := any(dst).([]float32); ok {
				addFloat32sTo32(d32, r)
			} else {
				addFloat32s(dst, r)
			}
		})
		return true
	}
	raw = raw[:8*n*d.width]
	d.spans(first-d.lo, n, true, func(dst []T, at int) {
		r := raw[8*at:][:8*len(dst)]
		for i := range dst {
			dst[i] = T(float64(dst[i]) + math.Float64frombits(binary.LittleEndian.Uint64(r[8*i:])))
		}
	})
	return true
}
