package kvstore

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// getHeld and addHeld (the fast path of a live table's owned batch) read
// and add exactly what Get and Add do, on every kind of store: the dense
// float64 range shard and dense guest store take the row copy, the others
// fall back; a key the store does not hold sends the call to the fallback.
func TestHeldRowsMatchGetAndAdd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   TableSpec
		shards int
		shard  int
		fast   bool
	}{
		{"dense float64 range shard", TableSpec{Name: "t", Size: 5000, Width: 3, Init: "uniform:1"}, 3, 1, true},
		{"dense float64 one shard width 1", TableSpec{Name: "t", Size: 100, Width: 1}, 1, 0, true},
		{"dense float32 range shard", TableSpec{Name: "t", Size: 300, Width: 4, DType: Float32, Init: "uniform:1"}, 2, 1, false},
		{"dense float64 hash shard", TableSpec{Name: "t", Size: 300, Width: 2, Partition: HashPartition, Init: "uniform:1"}, 2, 1, false},
		{"sparse float64", TableSpec{Name: "t", Size: 1 << 40, Width: 2, Storage: Sparse}, 2, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec.WithDefaults()
			dir, err := NewDirectory(spec, tc.shards)
			if err != nil {
				t.Fatal(err)
			}
			fast, ref := NewStore(spec, dir, tc.shard), NewStore(spec, dir, tc.shard)
			_, isRow := fast.(rowStore)
			lo, hi, contiguous := dir.Bounds(tc.shard)
			if !contiguous {
				lo, hi = 0, spec.Size
			}
			var held []uint64
			for k := lo; k < hi && len(held) < 4000; k++ {
				if dir.Owner(k) == tc.shard {
					held = append(held, k)
				}
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(held))))
			w := spec.Width
			for round := range 20 {
				keys := make([]uint64, 1+rng.IntN(200))
				for i := range keys {
					keys[i] = held[rng.IntN(len(held))]
				}
				if round%2 == 1 {
					slices.Sort(keys)
				}
				deltas := make([]float64, len(keys)*w)
				for i := range deltas {
					deltas[i] = float64(rng.IntN(100)) - 50
				}
				addHeld(fast, keys, deltas)
				ref.Add(keys, deltas)
				got, want := make([]float64, len(keys)*w), make([]float64, len(keys)*w)
				getHeld(fast, keys, got)
				ref.Get(keys, want)
				if !slices.Equal(got, want) {
					t.Fatalf("round %d: getHeld %v, Get %v", round, got, want)
				}
				if isRow {
					rs := fast.(rowStore)
					if ok := rs.getRows(keys, got); ok != tc.fast {
						t.Fatalf("getRows took the fast path: %v, want %v", ok, tc.fast)
					}
				}
			}
			if isRow && tc.fast && hi < spec.Size {
				// A key past the shard: no fast path, and nothing changes.
				rs := fast.(rowStore)
				if rs.getRows([]uint64{held[0], hi}, make([]float64, 2*w)) || rs.addRows([]uint64{hi}, make([]float64, w)) {
					t.Fatal("the fast path served a key the shard does not hold")
				}
			}
		})
	}
}
