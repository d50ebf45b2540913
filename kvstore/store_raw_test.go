package kvstore

import (
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
}

// TestUnsorted: the sortedness guess that picks a dense walk's locking.
func TestUnsorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	random := make([]uint64, 100)
	for i := range random {
		random[i] = rng.Uint64N(1 << 20)
	}
	ascending := []uint64{1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597, 2584, 4181, 6765}
	descending := slices.Clone(ascending)
	slices.Reverse(descending)
	for _, c := range []struct {
		name string
		keys []uint64
		want bool
	}{
		{"empty", nil, false},
		{"one", []uint64{7}, false},
		{"ascending", ascending, false},
		{"equal", []uint64{4, 4, 4, 4, 4, 4}, false},
		{"one step down in 16", append(slices.Clone(ascending[:10]), 0, 1, 2, 3, 4, 5, 6), false},
		{"descending", descending, true},
		{"random", random, true},
	} {
		if got := unsorted(c.keys); got != c.want {
			t.Errorf("%s: unsorted = %v, want %v", c.name, got, c.want)
		}
	}
}
