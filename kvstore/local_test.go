package kvstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"
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

// testLocalExact: goroutines add 0.25 to random keys, 8 or (every other
// goroutine) 64 a call, sorted or not, and read them; the sum is exact.
// With chunks of 4 a call of 64 keys takes every chunk lock at once
// (lockAllKeys) while calls of 8 take one chunk at a time.
func testLocalExact(t *testing.T, mode LockMode, chunk, goroutines int) {
	const size, N = 64, 2000
	lt := newLocal(t, TableSpec{Name: "w", Size: size}, mode, chunk)
	var wg sync.WaitGroup
	var added atomic.Int64
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			n := 8
			if g%2 == 1 {
				n = 64
			}
			keys := make([]uint64, n)
			deltas := make([]float64, n)
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
					lt.AddRange(r.Uint64N(size-8), 8, deltas[:8])
					added.Add(8)
				} else {
					lt.Add(keys, deltas)
					added.Add(int64(n))
				}
				lt.Get(keys, make([]float64, n))
			}
		})
	}
	wg.Wait()
	var sum float64
	for _, v := range lt.Values() {
		sum += v
	}
	equal(t, float64(added.Load())*0.25, sum)
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

// BenchmarkLocalTableLR is a local stage's table traffic: 2 goroutines each
// reading and then adding the distinct keys of LR batches (about 1000
// sorted keys drawn Zipf(1.1) from 1M, width 1), per lock mode and chunk
// size, with 1 goroutine (the locks' own cost) and 2 (plus contention and
// cache lines shared by hot keys). The baseline row is one goroutine doing
// the same Get and Add on a bare []float64: compare keys/s per goroutine
// as a ratio.
func BenchmarkLocalTableLR(b *testing.B) {
	const size, batch, nbatches = 1 << 20, 2000, 64
	// batches: a batch's distinct keys sorted; occ: the keys as an LR
	// batch meets them (lr's local kind sends them so, MiniBatch.Occurrences):
	// 100 rows of 20 sorted features, repeats and all.
	var batches, occ [2][nbatches][]uint64
	for g := range batches {
		r := rand.New(rand.NewPCG(uint64(g), 5))
		z := rand.NewZipf(r, 1.1, 1, size-1)
		for i := range batches[g] {
			seen := map[uint64]bool{}
			var ks, all []uint64
			for row := 0; row < batch; row += 20 {
				rk := make([]uint64, 20)
				for j := range rk {
					rk[j] = z.Uint64()
				}
				slices.Sort(rk)
				all = append(all, rk...)
				for _, k := range rk {
					if !seen[k] {
						seen[k] = true
						ks = append(ks, k)
					}
				}
			}
			slices.Sort(ks)
			batches[g][i], occ[g][i] = ks, all
		}
	}
	keysOf := func(n int) float64 {
		var s float64
		for i := range n {
			s += float64(len(batches[0][i%nbatches]))
		}
		return s
	}
	b.Run("baseline/plain-slice-1-goroutine", func(b *testing.B) {
		vals := make([]float64, size)
		buf := make([]float64, batch)
		for i := 0; b.Loop(); i++ {
			ks := batches[0][i%nbatches]
			for j, k := range ks {
				buf[j] = vals[k]
			}
			for j, k := range ks {
				vals[k] += buf[j]
			}
		}
		b.ReportMetric(keysOf(b.N)/b.Elapsed().Seconds(), "keys/s/goroutine")
	})
	// run: goroutines each Get and Add its batches (of keys: batches or
	// occ) in turn.
	run := func(b *testing.B, lt *LocalTable, goroutines int, keys *[2][nbatches][]uint64) {
		b.ResetTimer()
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				buf := make([]float64, batch)
				for i := range b.N {
					ks := keys[g][i%nbatches]
					lt.Get(ks, buf[:len(ks)])
					lt.Add(ks, buf[:len(ks)])
				}
			})
		}
		wg.Wait()
		b.ReportMetric(keysOf(b.N)/b.Elapsed().Seconds(), "keys/s/goroutine")
	}
	type cfg struct {
		mode  LockMode
		chunk int
	}
	for _, c := range []cfg{{ChunkLocks, 64}, {ChunkLocks, 1024}, {ChunkLocks, 4096}, {NoLocks, 1}} {
		for _, goroutines := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/chunk%d/g%d", c.mode, c.chunk, goroutines), func(b *testing.B) {
				run(b, newLocal(b, TableSpec{Name: "w", Size: size}, c.mode, c.chunk), goroutines, &batches)
			})
		}
	}
	// The same batches' occurrences, unsorted, in chunks of 4096 (the
	// local kind's default, slave.DefaultChunkSize): keys/s counts
	// distinct keys, so the rows compare with those above.
	for _, goroutines := range []int{1, 2} {
		b.Run(fmt.Sprintf("occurrences/%s/chunk4096/g%d", ChunkLocks, goroutines), func(b *testing.B) {
			run(b, newLocal(b, TableSpec{Name: "w", Size: size}, ChunkLocks, 4096), goroutines, &occ)
		})
	}
}

// TestLocalTableModel compares every lock mode and grouping path (sorted
// runs; counting and sorting by chunk for unsorted keys: chunk sizes of 1
// over 1000 keys make more chunks than a batch can count), for float64
// and float32 tables, with a plain slice under random Get/Add/Set calls
// with repeats and stray keys, and range calls. A float32 table holds
// each sum rounded once to float32, as the KV-store's float32 shards do.
func TestLocalTableModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		size := rapid.Uint64Range(1, 1000).Draw(rt, "size")
		width := rapid.IntRange(1, 3).Draw(rt, "width")
		mode := rapid.SampledFrom([]LockMode{ChunkLocks, NoLocks, GlobalLock}).Draw(rt, "mode")
		chunk := rapid.SampledFrom([]int{1, 3, 64, 4096}).Draw(rt, "chunk")
		dtype := rapid.SampledFrom([]DType{Float64, Float32}).Draw(rt, "dtype")
		lt, err := NewLocalTable(TableSpec{Name: "w", Size: size, Width: width, DType: dtype}, mode, chunk)
		if err != nil {
			rt.Fatal(err)
		}
		round := func(v float64) float64 {
			if dtype == Float32 {
				return float64(float32(v))
			}
			return v
		}
		model := make([]float64, size*uint64(width))
		for range rapid.IntRange(1, 20).Draw(rt, "ops") {
			keys := rapid.SliceOfN(rapid.Uint64Range(0, size+2), 0, 30).Draw(rt, "keys")
			if rapid.Bool().Draw(rt, "sorted") {
				slices.Sort(keys)
			}
			vals := make([]float64, len(keys)*width)
			for i := range vals {
				vals[i] = float64(rapid.IntRange(-4, 4).Draw(rt, "v")) / 3 // not float32 values
			}
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0:
				lt.Add(keys, vals)
				for i, k := range keys {
					for c := range width {
						if k < size {
							m := &model[k*uint64(width)+uint64(c)]
							*m = round(*m + vals[i*width+c])
						}
					}
				}
			case 1:
				lt.Set(keys, vals)
				for i, k := range keys {
					for c := range width {
						if k < size {
							model[k*uint64(width)+uint64(c)] = round(vals[i*width+c])
						}
					}
				}
			case 3, 4: // a range: Add, Set or Get, clipped at the table's end
				first := rapid.Uint64Range(0, size).Draw(rt, "first")
				n := rapid.IntRange(0, 40).Draw(rt, "n")
				rv := make([]float64, n*width)
				for i := range rv {
					rv[i] = float64(rapid.IntRange(-4, 4).Draw(rt, "rv")) / 7
				}
				in := int(min(uint64(n), size-first)) * width // values the table has
				lo := int(first) * width
				switch rapid.IntRange(0, 2).Draw(rt, "rop") {
				case 0:
					lt.AddRange(first, n, rv)
					for i := range in {
						model[lo+i] = round(model[lo+i] + rv[i])
					}
				case 1:
					lt.SetRange(first, n, rv)
					for i := range in {
						model[lo+i] = round(rv[i])
					}
				case 2:
					lt.GetRange(first, n, rv)
					if !slices.Equal(rv[:in], model[lo:lo+in]) {
						rt.Fatalf("range %d+%d: got %v want %v", first, n, rv[:in], model[lo:lo+in])
					}
				}
			case 2:
				lt.Get(keys, vals)
				for i, k := range keys {
					for c := range width {
						if k < size && vals[i*width+c] != model[k*uint64(width)+uint64(c)] {
							rt.Fatalf("key %d col %d: got %v want %v", k, c, vals[i*width+c], model[k*uint64(width)+uint64(c)])
						}
					}
				}
			}
		}
		if !slices.Equal(lt.Values(), model) {
			rt.Fatalf("values differ from the model")
		}
	})
}

// TestChunkDivExact: the shift and multiply-high divisions equal k / d
// for every divisor class (powers of two, other sizes below 2^32, and
// tables too large for the magic number) at random and edge keys.
func TestChunkDivExact(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		d := rapid.OneOf(
			rapid.Uint64Range(1, 5000),
			rapid.Uint64Range(1, 1<<32-1),
			rapid.Map(rapid.UintRange(0, 31), func(s uint) uint64 { return 1 << s }),
		).Draw(rt, "d")
		size := rapid.SampledFrom([]uint64{1 << 20, 1 << 32, 1<<32 + 1, 1 << 40}).Draw(rt, "size")
		c := newChunkDiv(size, d)
		keys := rapid.SliceOf(rapid.Uint64Range(0, size-1)).Draw(rt, "keys")
		keys = append(keys, 0, size-1, min(d, size-1), min(d-1, size-1), min(d+1, size-1))
		for _, k := range keys {
			if got, want := c.of(k), k/d; got != want {
				rt.Fatalf("size %d: %d / %d = %d, chunkDiv gives %d (%+v)", size, k, d, want, got, c)
			}
		}
	})
}
