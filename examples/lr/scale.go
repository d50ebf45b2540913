package lr

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// Scaler gives each feature's 1/scale: loaded whole for moderate
// dimensions, else read with each batch. lr.sgd and svrg.sgd train with
// it; PrepareScale builds it.
//
// A feature is scaled by the root mean square of its non-zero values
// (zeros stay zeros, a rare binary feature keeps the value 1). That
// leaves a dense feature with a large common offset (a radius of 14 +-
// 3.5) nearly collinear with the intercept, and SGD on such data crawls.
// So the features that are non-zero in at least half of the rows (the
// dense ones, at most maxCentered of them, the most frequent first) can
// be centered and scaled by their standard deviation instead, as
// scikit-learn's StandardScaler does: Center switches the Scaler to that
// mode and returns them. Centering is implicit (the trainer adds the
// dense features to every batch, which touches them anyway, and moves the
// intercept so the model stays a raw-space one), so sparse data stays
// sparse.
type Scaler struct {
	inv *invTable // 1/scale per key, when loaded whole
	t   tasks.Table
	buf []float64
	// cand are the dense features' centered statistics (Center applies
	// them), nil when the scales are not loaded whole.
	cand *Centered
}

// Centered are the centered features of a Scaler: Keys in increasing
// order, Inv their 1/standard deviation and C their mean over standard
// deviation (x' = x Inv - C is the standardized value).
type Centered struct {
	Keys []uint64
	Inv  []float64
	C    []float64
	// NormC is sum C^2: how far the centered intercept moves per unit of
	// the raw one.
	NormC float64
}

// maxCentered bounds the centered features: each is added to every batch.
const maxCentered = 1024

// centerShare is the fraction of rows a feature must be non-zero in to be
// centered.
const centerShare = 0.5

// Center switches the Scaler to centered scaling for the dense features
// and returns them (nil when there are none, or the scales are not loaded
// whole). Call it once, before any Lookup.
func (s *Scaler) Center() *Centered {
	c := s.cand
	if c == nil || len(c.Keys) == 0 {
		return nil
	}
	for i, k := range c.Keys {
		s.inv.set(k, c.Inv[i])
	}
	return c
}

// centered picks the dense features from per-key statistics (sum of
// squares, count of non-zero values, sum) over n rows.
func centered(n float64, stats func(k uint64) (sumSq, cnt, sum float64), size uint64) *Centered {
	p := centerPicker{n: n}
	for k := uint64(0); k < size; k++ {
		sumSq, cnt, sum := stats(k)
		p.offer(k, sumSq, cnt, sum)
	}
	return p.result()
}

// centerPicker picks the dense features from per-key statistics offered
// one key at a time, in increasing key order, so that the statistics of
// every key need not be held at once: it keeps only the candidates.
type centerPicker struct {
	n  float64 // rows
	cs []centerCand
}

type centerCand struct {
	k               uint64
	sumSq, cnt, sum float64
}

// offer considers key k.
func (p *centerPicker) offer(k uint64, sumSq, cnt, sum float64) {
	if p.n <= 0 || cnt < centerShare*p.n {
		return
	}
	m := sum / p.n
	if v := sumSq/p.n - m*m; !(v > 1e-12*sumSq/p.n) { // constant: the intercept's job
		return
	}
	p.cs = append(p.cs, centerCand{k, sumSq, cnt, sum})
}

// result returns the picked features.
func (p *centerPicker) result() *Centered {
	cs, n := p.cs, p.n
	if len(cs) > maxCentered {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].cnt > cs[j].cnt })
		cs = cs[:maxCentered]
		sort.Slice(cs, func(i, j int) bool { return cs[i].k < cs[j].k })
	}
	out := &Centered{}
	for _, c := range cs {
		m := c.sum / n
		sd := math.Sqrt(c.sumSq/n - m*m)
		out.Keys = append(out.Keys, c.k)
		out.Inv = append(out.Inv, 1/sd)
		out.C = append(out.C, m/sd)
		out.NormC += (m / sd) * (m / sd)
	}
	return out
}

// maxLoadedScales bounds the scales a worker keeps in memory (32 MiB).
const maxLoadedScales = 1 << 22

// chunkKeys is how many keys one statistics or rescaling request carries.
const chunkKeys = 1 << 16

// invScale is 1 / (root mean square of a feature's non-zero values), 1 for
// a feature never seen non-zero.
func invScale(sumSq, n float64) float64 {
	if n <= 0 || !(sumSq > 0) {
		return 1
	}
	return 1 / math.Sqrt(sumSq/n)
}

// Lookup writes 1/scale of each key into out (len(keys)).
func (s *Scaler) Lookup(keys []uint64, out []float64) error {
	if s.inv != nil {
		s.inv.lookup(keys, out)
		return nil
	}
	s.buf = grow(s.buf, ScaleWidth*len(keys))
	if err := s.t.Get(keys, s.buf); err != nil {
		return err
	}
	for i := range keys {
		out[i] = invScale(s.buf[ScaleWidth*i], s.buf[ScaleWidth*i+1])
	}
	return nil
}

// ScaleWidth is the width of ScaleTable(w): per feature the sum of
// squares, the count of non-zero values and the sum; key Size holds 1
// (the statistics are gathered) and the number of rows.
const ScaleWidth = 3

// squareOverflows names the record and feature of value j of r, whose
// square is no float64. The statistics sum squares, so the feature's
// scale became NaN and training failed with a loss blamed on the
// learning rate.
func squareOverflows(r *datastore.Records, j int) error {
	i := sort.Search(r.Len(), func(i int) bool { return r.Offsets[i+1] > j })
	return fmt.Errorf("%s: feature key %d (a LIBSVM feature id is its key + index_base, 1 by default) is %g, whose square overflows a float64 (scaling sums the squares): rescale the feature", r.Where(i), r.Keys[j], r.Vals[j])
}

// PrepareScale gathers the feature statistics of input train into st
// (the table ScaleTable(w) that AuxTables declares: size+1 keys of width
// ScaleWidth; key size marks them as gathered) unless an earlier stage
// did, and returns the Scaler. Every
// worker of the stage must call it: each adds its share of the input and
// they meet at Barriers.
func PrepareScale(info *tasks.Info, st tasks.Table, size uint64, train tasks.Input) (*Scaler, error) {
	if w := st.Spec().Width; w != ScaleWidth {
		return nil, fmt.Errorf("lr: table %q has width %d, want %d", st.Spec().Name, w, ScaleWidth)
	}
	marker := make([]float64, ScaleWidth)
	if err := st.Get([]uint64{size}, marker); err != nil {
		return nil, err
	}
	// Every worker has read the marker before anyone sets it.
	if err := info.Barrier(); err != nil {
		return nil, err
	}
	if marker[0] == 0 {
		acc := newScaleAcc(size)
		rows := 0
		ks := make([]uint64, 0, chunkKeys)
		vals := make([]float64, 0, ScaleWidth*chunkKeys)
		// add adds what was summed since its last call and clears it:
		// after each block this worker finished is confirmed, and once
		// after the pass. A worker that dies mid-pass so takes no
		// confirmed block's statistics with it (the survivors do not
		// read those blocks again); before, it took every block it had
		// confirmed, and features seen only there kept the scale 1.
		add := func() error {
			var addErr error
			flush := func() {
				if len(ks) > 0 && addErr == nil {
					addErr = st.Add(ks, vals)
				}
				ks, vals = ks[:0], vals[:0]
			}
			acc.each(func(k uint64, a *[ScaleWidth]float64) {
				ks = append(ks, k)
				vals = append(vals, a[:]...)
				if len(ks) == chunkKeys {
					flush()
				}
			})
			flush()
			if addErr != nil {
				return addErr
			}
			if rows > 0 {
				if err := st.Add([]uint64{size}, []float64{0, float64(rows), 0}); err != nil {
					return err
				}
			}
			acc.reset()
			rows = 0
			return st.Flush()
		}
		err := tasks.EachRecordsCommit(info.Ctx, train, func(r *datastore.Records) error {
			rows += r.Len()
			for j, k := range r.Keys {
				if k >= size {
					return KeyOutside(r, 0, r.Len(), kvstore.TableSpec{Name: strings.TrimSuffix(st.Spec().Name, ".scale"), Size: size})
				}
				if v := r.Vals[j]; v != 0 {
					if math.IsInf(v*v, 0) {
						return squareOverflows(r, j)
					}
					acc.add(k, v)
				}
			}
			return nil
		}, add)
		if err != nil {
			return nil, fmt.Errorf("lr: feature statistics: %w", err)
		}
		if err := add(); err != nil {
			return nil, err
		}
		if err := info.Barrier(); err != nil {
			return nil, err
		}
		// The first live worker, not rank 0, whose slave may have died.
		if idx, _ := info.Share(); idx == 0 {
			if err := st.Add([]uint64{size}, []float64{1, 0, 0}); err != nil {
				return nil, err
			}
		}
		marker[1] = -1 // read below, once every count is in
	}
	if marker[1] < 0 {
		if err := st.Get([]uint64{size}, marker); err != nil {
			return nil, err
		}
	}
	sc := &Scaler{t: st}
	if size <= maxLoadedScales {
		// A chunk of statistics at a time: the whole table (24 bytes a
		// key) is never held, only 1/scale per key and the candidates
		// for centering.
		sc.inv = newInvTable(size)
		pick := centerPicker{n: marker[1]}
		keys := make([]uint64, 0, chunkKeys)
		buf := make([]float64, ScaleWidth*chunkKeys)
		for lo := uint64(0); lo < size; lo += chunkKeys {
			keys = keys[:0]
			for k := lo; k < min(lo+chunkKeys, size); k++ {
				keys = append(keys, k)
			}
			b := buf[:ScaleWidth*len(keys)]
			if err := st.Get(keys, b); err != nil {
				return nil, err
			}
			for i, k := range keys {
				sumSq, cnt, sum := b[ScaleWidth*i], b[ScaleWidth*i+1], b[ScaleWidth*i+2]
				sc.inv.set(k, invScale(sumSq, cnt))
				pick.offer(k, sumSq, cnt, sum)
			}
		}
		sc.cand = pick.result()
	}
	return sc, nil
}

// rescale turns the weights of this worker's share of the keys from raw to
// scaled space (w * scale) or back (w / scale), then waits for every
// worker: the table holds raw-space weights between stages, so the saved
// model scores raw data.
func rescale(info *tasks.Info, w tasks.Table, sc *Scaler, toScaled bool) error {
	var inv []float64
	return mulShare(info, w, func(keys []uint64, v []float64) error {
		inv = grow(inv, len(keys))
		if err := sc.Lookup(keys, inv); err != nil {
			return err
		}
		for i := range v {
			if toScaled {
				v[i] /= inv[i] // w * scale
			} else {
				v[i] *= inv[i] // w / scale
			}
		}
		return nil
	})
}

// mulShare rewrites this worker's share of w's keys (an even split of
// [0, size) among the live workers, tasks.Info.Share) by f, which turns
// values into new values in place, between two Barriers: before, every
// worker's Adds are applied; after, every share is rewritten.
func mulShare(info *tasks.Info, w tasks.Table, f func(keys []uint64, v []float64) error) error {
	if err := info.Barrier(); err != nil {
		return err
	}
	// Shares among the workers alive at the Barrier: after a slave's
	// death the survivors still cover every key. Over a sparse table,
	// the keys it holds (a key never written is 0, and f keeps 0 at 0).
	vals := make([]float64, chunkKeys)
	old := make([]float64, chunkKeys)
	err := tasks.EachShareKeys(info, w, 0, chunkKeys, func(keys []uint64) error {
		v, o := vals[:len(keys)], old[:len(keys)]
		if err := w.Get(keys, v); err != nil {
			return err
		}
		copy(o, v)
		if err := f(keys, v); err != nil {
			return err
		}
		for i := range v {
			v[i] -= o[i]
		}
		return w.Add(keys, v)
	})
	if err != nil {
		return err
	}
	return info.Barrier()
}

// invTable holds 1/scale for every key of a table in the smallest exact
// form: most features share few scales (every binary feature's is 1), so
// the distinct values (by their bits) go in a dictionary and each key
// holds a 1- or 2-byte index into it; past 65536 distinct values, the
// float64s themselves. 1M keys of binary data take 1 MiB, not 8.
type invTable struct {
	dict []float64
	code map[uint64]int // a value's bits -> its index in dict
	i8   []uint8
	i16  []uint16
	f64  []float64
}

// newInvTable returns size keys of 1/scale 1.
func newInvTable(size uint64) *invTable {
	return &invTable{dict: []float64{1}, code: map[uint64]int{math.Float64bits(1): 0}, i8: make([]uint8, size)}
}

// set gives key k the value v, widening the indexes when the dictionary
// outgrows them.
func (t *invTable) set(k uint64, v float64) {
	if t.f64 != nil {
		t.f64[k] = v
		return
	}
	c, ok := t.code[math.Float64bits(v)]
	if !ok {
		c = len(t.dict)
		switch {
		case c == 1<<8 && t.i8 != nil:
			t.i16 = make([]uint16, len(t.i8))
			for i, x := range t.i8 {
				t.i16[i] = uint16(x)
			}
			t.i8 = nil
		case c == 1<<16:
			t.f64 = make([]float64, len(t.i16))
			for i, x := range t.i16 {
				t.f64[i] = t.dict[x]
			}
			t.i16, t.dict, t.code = nil, nil, nil
			t.f64[k] = v
			return
		}
		t.dict = append(t.dict, v)
		t.code[math.Float64bits(v)] = c
	}
	if t.i8 != nil {
		t.i8[k] = uint8(c)
	} else {
		t.i16[k] = uint16(c)
	}
}

// lookup writes the value of each key into out.
func (t *invTable) lookup(keys []uint64, out []float64) {
	switch {
	case t.i8 != nil:
		d := t.dict
		for i, k := range keys {
			out[i] = d[t.i8[k]]
		}
	case t.i16 != nil:
		d := t.dict
		for i, k := range keys {
			out[i] = d[t.i16[k]]
		}
	default:
		for i, k := range keys {
			out[i] = t.f64[k]
		}
	}
}

// scaleAcc sums a worker's share of the feature statistics (per key: sum
// of squares, count of non-zero values, sum). Binary features need only a
// count (v = 1: v*v and v add exactly 1), so while every value seen is 1
// and the table is small enough to be loaded whole, it keeps a uint32 per
// key, 4 bytes against some 60 of a map entry; the first other value
// moves the counts to the map, as the same float64 sums, and the map goes
// on from there.
type scaleAcc struct {
	counts []uint32
	m      map[uint64]*[ScaleWidth]float64
}

func newScaleAcc(size uint64) *scaleAcc {
	if size <= maxLoadedScales {
		return &scaleAcc{counts: make([]uint32, size)}
	}
	return &scaleAcc{m: map[uint64]*[ScaleWidth]float64{}}
}

// add counts value v (non-zero) of key k.
func (a *scaleAcc) add(k uint64, v float64) {
	if a.counts != nil {
		if v == 1 && a.counts[k] < math.MaxUint32 {
			a.counts[k]++
			return
		}
		a.m = map[uint64]*[ScaleWidth]float64{}
		for key, c := range a.counts {
			if c > 0 {
				f := float64(c)
				a.m[uint64(key)] = &[ScaleWidth]float64{f, f, f}
			}
		}
		a.counts = nil
	}
	s := a.m[k]
	if s == nil {
		s = new([ScaleWidth]float64)
		a.m[k] = s
	}
	s[0] += v * v
	s[1]++
	s[2] += v
}

// reset forgets every key's statistics (once they were added).
func (a *scaleAcc) reset() {
	if a.counts != nil {
		clear(a.counts)
		return
	}
	clear(a.m)
}

// each calls fn with the statistics of every key seen, in increasing key
// order.
func (a *scaleAcc) each(fn func(k uint64, s *[ScaleWidth]float64)) {
	if a.counts != nil {
		var s [ScaleWidth]float64
		for k, c := range a.counts {
			if c > 0 {
				f := float64(c)
				s = [ScaleWidth]float64{f, f, f}
				fn(uint64(k), &s)
			}
		}
		return
	}
	keys := make([]uint64, 0, len(a.m))
	for k := range a.m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		fn(k, a.m[k])
	}
}
