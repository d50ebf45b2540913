package kvstore

import (
	"context"
	"fmt"
	"maps"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/kvstore/ownership"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
)

const ownershipMaxIndexed = ownership.MaxIndexedKeys

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
		span   int // keys drawn from the shard's first span held keys (0: 4000)
	}{
		{"dense float64 many stripes", TableSpec{Name: "t", Size: 200000, Width: 16}, 1, 0, true, 30000},
		{"dense float64 beyond 64 stripes", TableSpec{Name: "t", Size: 200000, Width: 16}, 1, 0, false, 200000},
		{"dense float64 range shard", TableSpec{Name: "t", Size: 5000, Width: 3, Init: "uniform:1"}, 3, 1, true, 0},
		{"dense float64 one shard width 1", TableSpec{Name: "t", Size: 100, Width: 1}, 1, 0, true, 0},
		{"dense float32 range shard", TableSpec{Name: "t", Size: 300, Width: 4, DType: Float32, Init: "uniform:1"}, 2, 1, false, 0},
		{"dense float64 hash shard", TableSpec{Name: "t", Size: 300, Width: 2, Partition: HashPartition, Init: "uniform:1"}, 2, 1, false, 0},
		{"sparse float64", TableSpec{Name: "t", Size: 1 << 40, Width: 2, Storage: Sparse}, 2, 0, false, 0},
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
			span := tc.span
			if span == 0 {
				span = 4000
			}
			var held []uint64
			for k := lo; k < hi && len(held) < span; k++ {
				if dir.Owner(k) == tc.shard {
					held = append(held, k)
				}
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(held))))
			w := spec.Width
			for round := range 20 {
				keys := make([]uint64, 2+rng.IntN(200))
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
					want := tc.fast
					if tc.span == int(spec.Size) { // fast only within 64 stripes of 1024 keys
						want = slices.Max(keys)/1024-slices.Min(keys)/1024 < 64
					}
					if ok := rs.getRows(keys, got); ok != want {
						t.Fatalf("getRows took the fast path: %v, want %v", ok, want)
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

// BenchmarkHeldRows is a blocked MF batch's item rows: 900 distinct keys
// in first-seen (random) order from a block of the guest store, width 16,
// read then added back.
func BenchmarkHeldRows(b *testing.B) {
	for _, block := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("block=%d", block), func(b *testing.B) {
			spec := TableSpec{Name: "t", Size: uint64(4 * block), Width: 16}.WithDefaults()
			dir, err := NewDirectory(spec, 1)
			if err != nil {
				b.Fatal(err)
			}
			st := NewStore(spec, dir, 0)
			keys := rand.New(rand.NewPCG(1, 2)).Perm(block)[:900]
			ks := make([]uint64, len(keys))
			for i, k := range keys {
				ks[i] = uint64(k)
			}
			out := make([]float64, len(ks)*16)
			b.ResetTimer()
			for range b.N {
				getHeld(st, ks, out)
				addHeld(st, ks, out)
			}
		})
	}
}

// Fast-path readers and writers, which hold several stripes at once, run
// beside Get and Add, which walk one stripe at a time, on overlapping
// keys: nothing deadlocks, every Add lands once, and no read sees half of
// an Add to a row (each Add adds the same value to a row's columns).
func TestHeldRowsBesideWalkers(t *testing.T) {
	spec := TableSpec{Name: "t", Size: 40000, Width: 16}.WithDefaults()
	dir, err := NewDirectory(spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	st := NewStore(spec, dir, 0)
	const workers, ops = 4, 300
	added := make([][]float64, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		added[w] = make([]float64, spec.Size)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			for i := range ops {
				keys := make([]uint64, 1+rng.IntN(300))
				for j := range keys {
					keys[j] = uint64(rng.IntN(int(spec.Size)))
				}
				vals := make([]float64, len(keys)*16)
				if i%2 == 0 {
					if w%2 == 0 {
						getHeld(st, keys, vals)
					} else {
						st.Get(keys, vals)
					}
					for j := range keys {
						row := vals[j*16 : (j+1)*16]
						for _, v := range row {
							if v != row[0] {
								errs <- fmt.Errorf("worker %d: key %d read half an Add: %v", w, keys[j], row)
								return
							}
						}
					}
					continue
				}
				v := float64(w + 1)
				for j, k := range keys {
					for c := range 16 {
						vals[j*16+c] = v
					}
					added[w][k] += v
				}
				if w%2 == 0 {
					addHeld(st, keys, vals)
				} else {
					st.Add(keys, vals)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all := make([]uint64, spec.Size)
	for k := range all {
		all[k] = uint64(k)
	}
	got := make([]float64, len(all)*16)
	st.Get(all, got)
	for k := range all {
		var want float64
		for w := range workers {
			want += added[w][k]
		}
		if got[k*16] != want || got[k*16+15] != want {
			t.Fatalf("key %d = %v, want %v", k, got[k*16:k*16+16], want)
		}
	}
}

// The fast path locks exactly the stripes its keys fall in, whatever
// order the keys come in.
func TestHeldRowsLockTheirStripes(t *testing.T) {
	spec := TableSpec{Name: "t", Size: 40000, Width: 16}.WithDefaults()
	dir, err := NewDirectory(spec, 2)
	if err != nil {
		t.Fatal(err)
	}
	d := NewStore(spec, dir, 1).(*dense[float64])
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		keys := make([]uint64, 1+rng.IntN(20))
		for i := range keys {
			keys[i] = d.lo + uint64(rng.IntN(int(d.hi-d.lo)))
		}
		_, first, mask, ok := d.rows(keys)
		if !ok {
			t.Fatalf("keys %v: no fast path", keys)
		}
		want := map[uint64]bool{}
		for _, k := range keys {
			want[(k-d.lo)>>d.shift] = true
		}
		got := map[uint64]bool{}
		for m := mask; m != 0; m &= m - 1 {
			got[first+uint64(bits.TrailingZeros64(m))] = true
		}
		if !maps.Equal(want, got) {
			t.Fatalf("keys %v: stripes locked %v, want %v", keys, got, want)
		}
	}
}

// A table is static until the first relocation reaches its slave: no
// guest store, no ownership bitset. The first Localize makes both, and
// the guest store is dense for a table that fits denseGuestMaxBytes.
func TestTableActivatesAtFirstRelocation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  TableSpec
		dense bool
	}{
		{"small dense", TableSpec{Name: "w", Size: 40, Width: 2}, true},
		{"large sparse", TableSpec{Name: "w", Size: 1 << 40, Width: 2, Storage: Sparse}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := transport.NewMem()
			hosts := []string{"a", "b"}
			var servers []*Server
			for _, h := range hosts {
				s, err := NewServer(tr, h, zerolog.Nop())
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if err := s.CreateTables("t", h, []Placement{{Spec: tc.spec, Hosts: hosts}}); err != nil {
					t.Fatal(err)
				}
				servers = append(servers, s)
			}
			lv := servers[0].hosted("t", "w").live
			if lv.guest != nil || lv.node.Indexed() || lv.dynamic.Load() {
				t.Fatal("a table nobody localized has a guest store or an ownership bitset")
			}
			cl, err := NewClient(ClientConfig{Transport: tr, Task: "t", Hosts: hosts, Self: "a", Server: servers[0],
				Consistency: Consistency{Kind: ASP}, Timeout: 10 * time.Second, Ctx: context.Background()})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			tc2, err := cl.Table(Placement{Spec: tc.spec, Hosts: hosts})
			if err != nil {
				t.Fatal(err)
			}
			far := tc.spec.Size - 1 // range partitioning: slave b's
			if tc2.Local(far) {
				t.Fatalf("key %d is slave a's already", far)
			}
			if err := tc2.Localize([]uint64{far}); err != nil {
				t.Fatal(err)
			}
			lv.mu.RLock()
			defer lv.mu.RUnlock()
			if !lv.dynamic.Load() || lv.guest == nil || lv.node.Indexed() != (tc.spec.Size <= ownershipMaxIndexed) {
				t.Fatalf("after a Localize: dynamic %v, guest store %v, bitset %v", lv.dynamic.Load(), lv.guest != nil, lv.node.Indexed())
			}
			if _, dense := lv.guest.(*dense[float64]); dense != tc.dense {
				t.Fatalf("guest store dense: %v, want %v", dense, tc.dense)
			}
			if !lv.node.Owns(far) {
				t.Fatalf("key %d not owned by slave a after its Localize", far)
			}
		})
	}
}
