package kvstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAppendRawMatchesGet: a dense shard's raw encoding of keys (the
// reply of a remote Get) holds exactly what Get reads, for one value per
// key (its own loop) and wider rows, keys of other shards as zeros.
func TestAppendRawMatchesGet(t *testing.T) {
	for _, c := range allStoreCases() {
		if c.storage != Dense {
			continue
		}
		for _, width := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/%s/%s/w%d", c.storage, c.dtype, c.part, width), func(t *testing.T) {
				const size = 1000
				s, d := newTestStore(t, c, size, width, 2, 1, "uniform:1")
				keys := []uint64{999, 0, 500, 501, 1, 998, 500, 3, 999}
				deltas := make([]float64, len(keys)*width)
				for i := range deltas {
					deltas[i] = float64(i) + 0.25
				}
				s.Add(keys, deltas)
				got := make([]float64, len(keys)*width)
				rawToFloats(s.(rawAppender).AppendRaw([]byte{7}, keys)[1:], c.dtype, got)
				want := make([]float64, len(keys)*width)
				s.Get(keys, want)
				for i, k := range keys {
					for j := range width {
						g, w := got[i*width+j], want[i*width+j]
						if d.Owner(k) != 1 {
							w = 0
						}
						if g != w {
							t.Fatalf("key %d value %d: raw %v, Get %v", k, j, g, w)
						}
					}
				}
			})
		}
	}
}

// TestAddRawMatchesAdd: adding float32 deltas as they came on the wire
// (AddRaw, one pass) leaves a dense shard exactly as converting them and
// calling Add does, for row widths around the four-value step, repeated
// keys, keys of other shards (skipped) and values across magnitudes.
func TestAddRawMatchesAdd(t *testing.T) {
	for _, c := range allStoreCases() {
		if c.storage != Dense {
			continue
		}
		for _, width := range []int{1, 3, 4, 5, 64, 67} {
			t.Run(fmt.Sprintf("%s/%s/%s/w%d", c.storage, c.dtype, c.part, width), func(t *testing.T) {
				const size = 1000
				viaAdd, d := newTestStore(t, c, size, width, 2, 1, "uniform:1")
				viaRaw, _ := newTestStore(t, c, size, width, 2, 1, "uniform:1")
				rng := rand.New(rand.NewPCG(uint64(width), 5))
				for range 20 {
					keys := make([]uint64, 50)
					for i := range keys {
						keys[i] = rng.Uint64N(size)
					}
					deltas := make([]float64, len(keys)*width)
					for i := range deltas {
						deltas[i] = float64(float32((rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(12)-6))))
					}
					raw := make([]byte, 4*len(deltas))
					putFloat32s(raw, deltas)
					viaAdd.Add(keys, deltas)
					if !viaRaw.(rawAdder).AddRaw(keys, raw, Float32) {
						t.Fatal("AddRaw refused float32 deltas")
					}
				}
				if viaRaw.(rawAdder).AddRaw(nil, nil, Float64) {
					t.Fatal("AddRaw took float64 deltas")
				}
				var keys []uint64
				for k := range uint64(size) {
					if d.Owner(k) == 1 {
						keys = append(keys, k)
					}
				}
				want, got := make([]float64, len(keys)*width), make([]float64, len(keys)*width)
				viaAdd.Get(keys, want)
				viaRaw.Get(keys, got)
				for i := range want {
					if math.Float64bits(want[i]) != math.Float64bits(got[i]) {
						t.Fatalf("value %d (key %d): AddRaw %v, Add %v", i, keys[i/width], got[i], want[i])
					}
				}
			})
		}
	}
}

// TestAddRawStripeRuns: the width-1 float32 walks of a range shard, which
// add (AddRaw) and read (AppendRaw) a run of keys per stripe, match Add
// and Get across stripe borders
// for sorted keys (one stripe at a time), descending ones, unsorted ones
// (many: every stripe at once; few: stripe by stripe, stepping back),
// repeats, keys just outside the shard on both sides, and the shard's
// first and last keys.
func TestAddRawStripeRuns(t *testing.T) {
	const size = 5*stripeVals + 123 // shard 1 of 2: several stripes and a short last one
	c := storeCase{storage: Dense, dtype: Float32, part: RangePartition}
	viaAdd, d := newTestStore(t, c, size, 1, 2, 1, "")
	viaRaw, _ := newTestStore(t, c, size, 1, 2, 1, "")
	owned := ownedKeys(d, 1, size)
	lo, hi := owned[0], owned[len(owned)-1]
	rng := rand.New(rand.NewPCG(7, 8))
	draw := func(n int) []uint64 {
		ks := make([]uint64, n)
		for i := range ks {
			ks[i] = lo - 3 + rng.Uint64N(hi-lo+7) // a few keys of shard 0 and past the end
		}
		return ks
	}
	sorted := draw(5000)
	slices.Sort(sorted)
	descending := slices.Clone(sorted)
	slices.Reverse(descending)
	calls := []struct {
		name string
		keys []uint64
	}{
		{"sorted", sorted},
		{"descending", descending},
		{"unsorted many", draw(20000)},
		{"unsorted few", draw(40)},
		{"edges", []uint64{lo - 1, lo, hi, hi + 1, lo, hi, lo + stripeVals - 1, lo + stripeVals, lo + stripeVals - 1, size - 1}},
	}
	for _, call := range calls {
		deltas := make([]float64, len(call.keys))
		for i := range deltas {
			deltas[i] = float64(float32(rng.NormFloat64()))
		}
		raw := make([]byte, 4*len(deltas))
		putFloat32s(raw, deltas)
		viaAdd.Add(call.keys, deltas)
		if !viaRaw.(rawAdder).AddRaw(call.keys, raw, Float32) {
			t.Fatalf("%s: AddRaw refused float32 deltas", call.name)
		}
		want, got := make([]float64, len(owned)), make([]float64, len(owned))
		viaAdd.Get(owned, want)
		viaRaw.Get(owned, got)
		for i, k := range owned {
			if math.Float64bits(want[i]) != math.Float64bits(got[i]) {
				t.Fatalf("after %s: key %d: AddRaw %v, Add %v", call.name, k, got[i], want[i])
			}
		}
		// The same walk answers reads: the call's keys read back as
		// their values, keys of the other shard as zeros.
		read := make([]float64, len(call.keys))
		rawToFloats(viaRaw.(rawAppender).AppendRaw(nil, call.keys), Float32, read)
		for i, k := range call.keys {
			var v [1]float64
			if d.Owner(k) == 1 {
				viaRaw.Get([]uint64{k}, v[:])
			}
			if math.Float64bits(read[i]) != math.Float64bits(v[0]) {
				t.Fatalf("%s: AppendRaw of key %d: %v, want %v", call.name, k, read[i], v[0])
			}
		}
	}
}

// BenchmarkAddRaw: a shard applying a remote Add of float32 deltas,
// decoded and added in one pass (raw) against converted to float64 first
// and added (convert+add, the path of other dtypes).
func BenchmarkAddRaw(b *testing.B) {
	for _, width := range []int{1, 64} {
		c := storeCase{storage: Dense, dtype: Float32, part: RangePartition}
		const size = 1 << 16
		s, _ := newTestStore(b, c, size, width, 1, 0, "")
		rng := rand.New(rand.NewPCG(1, 2))
		keys := make([]uint64, 4096)
		for i := range keys {
			keys[i] = rng.Uint64N(size)
		}
		deltas := make([]float64, len(keys)*width)
		raw := make([]byte, 4*len(deltas))
		putFloat32s(raw, deltas)
		b.Run(fmt.Sprintf("w%d/raw", width), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				s.(rawAdder).AddRaw(keys, raw, Float32)
			}
		})
		b.Run(fmt.Sprintf("w%d/convert+add", width), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			conv := make([]float64, len(deltas))
			for b.Loop() {
				rawInto(conv, raw, Float32)
				s.Add(keys, conv)
			}
		})
	}
	// A bulk push of scalars: 1M sorted distinct keys of a 4M width-1
	// shard (bench/kv's 1M x 1 calls), against a plain loop over a bare
	// slice.
	const size = 4 << 20
	s, _ := newTestStore(b, storeCase{storage: Dense, dtype: Float32, part: RangePartition}, size, 1, 1, 0, "")
	rng := rand.New(rand.NewPCG(1, 2))
	seen := make([]bool, size)
	for n := 0; n < 1<<20; {
		if k := rng.Uint64N(size); !seen[k] {
			seen[k], n = true, n+1
		}
	}
	var keys []uint64
	for k, in := range seen {
		if in {
			keys = append(keys, uint64(k))
		}
	}
	raw := make([]byte, 4*len(keys))
	b.Run("sorted1M/raw", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			s.(rawAdder).AddRaw(keys, raw, Float32)
		}
	})
	b.Run("sorted1M/plain-slice", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		vals := make([]float32, size)
		for b.Loop() {
			for i, k := range keys {
				vals[k] += math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		}
	})
}

// TestLockAll: the guess that picks a dense walk's locking. Keys that
// never step back take one stripe at a time however many there are;
// rows of sorted features one after another (a batch's keys as it met
// them) and random keys take every stripe at once when they are many.
func TestLockAll(t *testing.T) {
	const size = 1 << 20
	s, _ := newTestStore(t, storeCase{Dense, Float32, RangePartition}, size, 1, 1, 0, "")
	d := s.(*dense[float32])
	stripes := len(d.locks) // 64 stripes of 16384 keys
	rng := rand.New(rand.NewPCG(1, 1))
	randomKeys := func(n int) []uint64 {
		ks := make([]uint64, n)
		for i := range ks {
			ks[i] = rng.Uint64N(size)
		}
		return ks
	}
	rows := func(n, per int) []uint64 { // n rows of per sorted keys each
		var ks []uint64
		for range n {
			row := randomKeys(per)
			slices.Sort(row)
			ks = append(ks, row...)
		}
		return ks
	}
	sorted := randomKeys(5000)
	slices.Sort(sorted)
	dense := make([]uint64, 60000) // sorted, consecutive: a bulk push
	for i := range dense {
		dense[i] = uint64(i)
	}
	twoRuns := append(slices.Clone(dense[:3000]), dense[:3000]...)
	descending := slices.Clone(sorted)
	slices.Reverse(descending)
	for _, c := range []struct {
		name string
		keys []uint64
		want bool
	}{
		{"empty", nil, false},
		{"fewer than the stripes", randomKeys(stripes), false},
		{"sorted", sorted, false},
		{"sorted consecutive", dense, false},
		{"two sorted consecutive runs", twoRuns, false},
		{"equal", slices.Repeat([]uint64{4}, 1000), false},
		{"not owned", slices.Repeat([]uint64{size + 5, size + 1}, 1000), false},
		{"descending", descending, false}, // one switch per stripe too
		{"random", randomKeys(1000), true},
		{"rows of 20 sorted features", rows(40, 20), true},
		{"rows of 20 sorted features, fewer keys than stripes", rows(3, 20), false},
		{"long rows", rows(4, 1000), false}, // a few switches back, each after a full sweep
	} {
		if got := d.lockAll(c.keys); got != c.want {
			t.Errorf("%s (%d keys, %d stripes): lockAll = %v, want %v", c.name, len(c.keys), stripes, got, c.want)
		}
	}
}
