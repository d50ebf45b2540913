package lr

import (
	"fmt"
	"math"
	"sort"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// Scaler gives each feature's 1/scale: loaded whole for moderate
// dimensions, else read with each batch. lr.sgd and svrg.sgd train with
// it; PrepareScale builds it.
type Scaler struct {
	inv []float64 // 1/scale per key, when loaded whole
	t   tasks.Table
	buf []float64
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
		for i, k := range keys {
			out[i] = s.inv[k]
		}
		return nil
	}
	s.buf = grow(s.buf, 2*len(keys))
	if err := s.t.Get(keys, s.buf); err != nil {
		return err
	}
	for i := range keys {
		out[i] = invScale(s.buf[2*i], s.buf[2*i+1])
	}
	return nil
}

// PrepareScale gathers the feature statistics of input train into st
// (the table ScaleTable(w) that AuxTables declares: size+1 keys, width 2,
// sum of squares and count of non-zero values; key size marks them as
// gathered) unless an earlier stage did, and returns the Scaler. Every
// worker of the stage must call it: each adds its share of the input and
// they meet at Barriers.
func PrepareScale(info *tasks.Info, st tasks.Table, size uint64, train tasks.Input) (*Scaler, error) {
	marker := make([]float64, 2)
	if err := st.Get([]uint64{size}, marker); err != nil {
		return nil, err
	}
	// Every worker has read the marker before anyone sets it.
	if err := info.Barrier(); err != nil {
		return nil, err
	}
	if marker[0] == 0 {
		acc := map[uint64]*[2]float64{}
		err := tasks.EachRecords(info.Ctx, train, func(r *datastore.Records) error {
			for j, k := range r.Keys {
				if k >= size {
					return fmt.Errorf("lr: feature key %d is outside the table (size %d)", k, size)
				}
				v := r.Vals[j]
				if v == 0 {
					continue
				}
				a := acc[k]
				if a == nil {
					a = new([2]float64)
					acc[k] = a
				}
				a[0] += v * v
				a[1]++
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("lr: feature statistics: %w", err)
		}
		keys := make([]uint64, 0, len(acc))
		for k := range acc {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		vals := make([]float64, 0, 2*min(len(keys), chunkKeys))
		for lo := 0; lo < len(keys); lo += chunkKeys {
			ks := keys[lo:min(lo+chunkKeys, len(keys))]
			vals = vals[:0]
			for _, k := range ks {
				vals = append(vals, acc[k][0], acc[k][1])
			}
			if err := st.Add(ks, vals); err != nil {
				return nil, err
			}
		}
		if err := info.Barrier(); err != nil {
			return nil, err
		}
		if info.Rank == 0 {
			if err := st.Add([]uint64{size}, []float64{1, 0}); err != nil {
				return nil, err
			}
		}
	}
	sc := &Scaler{t: st}
	if size <= maxLoadedScales {
		sc.inv = make([]float64, size)
		keys := make([]uint64, 0, chunkKeys)
		buf := make([]float64, 2*chunkKeys)
		for lo := uint64(0); lo < size; lo += chunkKeys {
			keys = keys[:0]
			for k := lo; k < min(lo+chunkKeys, size); k++ {
				keys = append(keys, k)
			}
			if err := st.Get(keys, buf[:2*len(keys)]); err != nil {
				return nil, err
			}
			for i, k := range keys {
				sc.inv[k] = invScale(buf[2*i], buf[2*i+1])
			}
		}
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
	size := w.Spec().Size
	// Shares among the workers alive at the Barrier: after a slave's
	// death the survivors still cover every key.
	idx, count := info.Share()
	n := uint64(count)
	lo, hi := size*uint64(idx)/n, size*uint64(idx+1)/n
	keys := make([]uint64, 0, chunkKeys)
	vals := make([]float64, chunkKeys)
	old := make([]float64, chunkKeys)
	for first := lo; first < hi; first += chunkKeys {
		keys = keys[:0]
		for k := first; k < min(first+chunkKeys, hi); k++ {
			keys = append(keys, k)
		}
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
		if err := w.Add(keys, v); err != nil {
			return err
		}
	}
	return info.Barrier()
}
