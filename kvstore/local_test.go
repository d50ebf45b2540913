package kvstore

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

func newLocal(t testing.TB, spec TableSpec, mode LockMode, chunk int) *LocalTable {
	t.Helper()
	lt, err := NewLocalTable(spec, mode, chunk)
	noErr(t, err)
	return lt
}

func TestLocalTableBasics(t *testing.T) {
	for _, mode := range []LockMode{ChunkLocks, NoLocks, GlobalLock} {
		for _, st := range []Storage{Dense, Sparse} {
			t.Run(fmt.Sprint(mode, "/", st), func(t *testing.T) {
				spec := TableSpec{Name: "w", Size: 100, Width: 2, Storage: st, Init: "uniform:1"}
				lt := newLocal(t, spec, mode, 8)
				init, _ := parseInit(spec.Init)
				out := make([]float64, 4)
				lt.Get([]uint64{3, 50}, out)
				equal(t, []float64{init.Value(3, 0), init.Value(3, 1), init.Value(50, 0), init.Value(50, 1)}, out)
				// Unsorted keys with repeats spanning chunks.
				lt.Set([]uint64{40, 3, 90}, []float64{0, 0, 0, 0, 0, 0})
				lt.Add([]uint64{90, 3, 40, 3}, []float64{1, 2, 3, 4, 5, 6, 7, 8})
				out = make([]float64, 6)
				lt.Get([]uint64{3, 40, 90}, out)
				equal(t, []float64{10, 12, 5, 6, 1, 2}, out)
				lt.AddRange(2, 10, make([]float64, 20))
				lt.AddRange(38, 4, []float64{1, 1, 1, 1, 1, 1, 1, 1})
				r := make([]float64, 8)
				lt.GetRange(38, 4, r)
				equal(t, 6.0, r[4], "key 40 col 0")
				equal(t, 7.0, r[5], "key 40 col 1")
				// Out of range keys are ignored; a range is clipped at Size.
				lt.Add([]uint64{100, 1 << 40}, make([]float64, 4))
				lt.AddRange(99, 5, make([]float64, 10))
				if st == Dense {
					equal(t, 200, len(lt.Values()))
					equal(t, 10.0, lt.Values()[6])
				} else {
					check(t, lt.Values() == nil)
				}
			})
		}
	}
	_, err := NewLocalTable(TableSpec{Name: "w", Size: 10}, ChunkLocks, 0)
	isErr(t, err, ErrBadSpec)
	_, err = NewLocalTable(TableSpec{Name: "w"}, ChunkLocks, 1)
	isErr(t, err, ErrBadSpec)
	_, err = NewLocalTable(TableSpec{Name: "w", Size: 10}, LockMode(9), 1)
	isErr(t, err, ErrBadSpec)
}

// TestLocalTableConcurrentExact: concurrent Adds (sorted, unsorted and
// range) to overlapping chunks lose nothing under chunk and global locks.
func TestLocalTableConcurrentExact(t *testing.T) {
	for _, mode := range []LockMode{ChunkLocks, GlobalLock} {
		for _, chunk := range []int{1, 4, 64} {
			t.Run(fmt.Sprint(mode, "/", chunk), func(t *testing.T) {
				testLocalExact(t, mode, chunk, 8)
			})
		}
	}
}

func testLocalExact(t *testing.T, mode LockMode, chunk, goroutines int) {
	const size, N = 64, 2000
	lt := newLocal(t, TableSpec{Name: "w", Size: size}, mode, chunk)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			keys := make([]uint64, 8)
			deltas := make([]float64, 8)
			for i := range deltas {
				deltas[i] = 0.25
			}
			for i := range N {
				for j := range keys {
					keys[j] = r.Uint64N(size)
				}
				if i%3 == 0 {
					sortU64(keys)
				}
				if i%5 == 0 {
					lt.AddRange(r.Uint64N(size-8), 8, deltas)
				} else {
					lt.Add(keys, deltas)
				}
				lt.Get(keys, make([]float64, 8))
			}
		})
	}
	wg.Wait()
	var sum float64
	for _, v := range lt.Values() {
		sum += v
	}
	equal(t, float64(goroutines*N*8)*0.25, sum)
}

func TestLocalTableAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race")
	}
	lt := newLocal(t, TableSpec{Name: "w", Size: 1000, Width: 4}, ChunkLocks, 16)
	keys := []uint64{500, 3, 999, 3, 42, 17}
	vals := make([]float64, len(keys)*4)
	lt.Add(keys, vals)
	a := testing.AllocsPerRun(100, func() {
		lt.Add(keys, vals)
		lt.Get(keys, vals)
		lt.AddRange(10, 6, vals)
	})
	equal(t, 0.0, a)
}

// BenchmarkLocalTableAdd: 2 goroutines adding batches of 100 sorted random
// keys (width 1) under chunk locks of several sizes and a global lock.
func BenchmarkLocalTableAdd(b *testing.B) {
	type cfg struct {
		mode  LockMode
		chunk int
	}
	for _, c := range []cfg{{ChunkLocks, 1}, {ChunkLocks, 64}, {ChunkLocks, 4096}, {GlobalLock, 1}, {NoLocks, 1}} {
		name := fmt.Sprintf("%s/chunk%d", c.mode, c.chunk)
		b.Run(name, func(b *testing.B) {
			const size, batch = 1 << 20, 100
			lt := newLocal(b, TableSpec{Name: "w", Size: size}, c.mode, c.chunk)
			var batches [2][64][]uint64
			for g := range batches {
				r := rand.New(rand.NewPCG(uint64(g), 3))
				for i := range batches[g] {
					ks := make([]uint64, batch)
					for j := range ks {
						ks[j] = r.Uint64N(size)
					}
					sortU64(ks)
					batches[g][i] = ks
				}
			}
			deltas := make([]float64, batch)
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for g := range 2 {
				wg.Go(func() {
					for i := range b.N / 2 {
						lt.Add(batches[g][i%64], deltas)
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N/2*2*batch)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}
