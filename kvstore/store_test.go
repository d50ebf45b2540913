package kvstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

type storeCase struct {
	storage Storage
	dtype   DType
	part    Partition
}

func allStoreCases() []storeCase {
	var cs []storeCase
	for _, st := range []Storage{Dense, Sparse} {
		for _, dt := range []DType{Float64, Float32} {
			for _, p := range []Partition{RangePartition, HashPartition} {
				cs = append(cs, storeCase{st, dt, p})
			}
		}
	}
	return cs
}

func (c storeCase) String() string { return fmt.Sprintf("%s/%s/%s", c.storage, c.dtype, c.part) }

func newTestStore(t testing.TB, c storeCase, size uint64, width, shards, shard int, init string) (Store, Directory) {
	t.Helper()
	spec := TableSpec{Name: "w", Size: size, Width: width, DType: c.dtype, Storage: c.storage, Partition: c.part, Init: init}.WithDefaults()
	noErr(t, spec.Validate())
	d, err := NewDirectory(spec, shards)
	noErr(t, err)
	return NewStore(spec, d, shard), d
}

func ownedKeys(d Directory, shard int, size uint64) []uint64 {
	var ks []uint64
	for k := range size {
		if d.Owner(k) == shard {
			ks = append(ks, k)
		}
	}
	return ks
}

func TestStoreBasics(t *testing.T) {
	for _, c := range allStoreCases() {
		t.Run(c.String(), func(t *testing.T) {
			const size, width, shards, shard = 50, 3, 3, 1
			s, d := newTestStore(t, c, size, width, shards, shard, "uniform:0.5")
			init, _ := parseInit("uniform:0.5")
			keys := ownedKeys(d, shard, size)
			conv := func(v float64) float64 {
				if c.dtype == Float32 {
					return float64(float32(v))
				}
				return v
			}
			// Unwritten keys read as Init.
			out := make([]float64, len(keys)*width)
			s.Get(keys, out)
			for i, k := range keys {
				for col := range width {
					equal(t, conv(init.Value(k, col)), out[i*width+col], "key %d col %d", k, col)
				}
			}
			// Add twice to a key (duplicate keys in one batch both count).
			k := keys[2]
			s.Add([]uint64{k, k}, []float64{1, 2, 3, 1, 2, 3})
			got := make([]float64, width)
			s.Get([]uint64{k}, got)
			for col := range width {
				want := conv(conv(conv(init.Value(k, col))+float64(col+1)) + float64(col+1))
				equal(t, want, got[col])
			}
			// Set overwrites.
			s.Set([]uint64{k}, []float64{7, 8, 9})
			s.Get([]uint64{k}, got)
			equal(t, []float64{7, 8, 9}, got)
			// Foreign and out-of-range keys are ignored and leave out untouched.
			foreign := []uint64{ownedKeys(d, 0, size)[0], size + 5}
			s.Add(foreign, make([]float64, 2*width))
			s.Set(foreign, make([]float64, 2*width))
			sentinel := []float64{-1, -1, -1, -1, -1, -1}
			s.Get(foreign, sentinel)
			equal(t, []float64{-1, -1, -1, -1, -1, -1}, sentinel)
			// Len and Range.
			if c.storage == Dense {
				equal(t, len(keys), s.Len())
			} else {
				equal(t, 1, s.Len())
			}
			var visited []uint64
			s.Range(func(key uint64, vals []float64) bool {
				visited = append(visited, key)
				if key == k {
					equal(t, []float64{7, 8, 9}, vals)
				}
				return true
			})
			if c.storage == Dense {
				equal(t, keys, visited)
			} else {
				equal(t, []uint64{k}, visited)
			}
			n := 0
			s.Range(func(uint64, []float64) bool { n++; return false })
			equal(t, 1, n, "Range stops")
		})
	}
}

func TestStoreRangeOps(t *testing.T) {
	for _, c := range allStoreCases() {
		t.Run(c.String(), func(t *testing.T) {
			const size, width = 1000, 2
			s, d := newTestStore(t, c, size, width, 2, 0, "zero")
			lo, hi := uint64(0), uint64(500)
			if c.part == HashPartition {
				lo, hi = 0, 0 // range ops on hash shards still work key by key
			}
			_ = d
			first, n := lo+10, 300
			if c.part == HashPartition {
				// Only even keys are owned; the rest must be ignored.
				first, n = 10, 300
			}
			deltas := make([]float64, n*width)
			for i := range deltas {
				deltas[i] = float64(i)
			}
			s.AddRange(first, n, deltas)
			s.AddRange(first, n, deltas)
			out := make([]float64, n*width)
			for i := range out {
				out[i] = -1
			}
			s.GetRange(first, n, out)
			for i := range n {
				k := first + uint64(i)
				for col := range width {
					want := 2 * float64(i*width+col)
					if d.Owner(k) != 0 {
						want = -1
					}
					equal(t, want, out[i*width+col], "key %d", k)
				}
			}
			// Range ops agree with keyed ops.
			keys := make([]uint64, n)
			for i := range keys {
				keys[i] = first + uint64(i)
			}
			out2 := make([]float64, n*width)
			copy(out2, out)
			s.Get(keys, out2)
			equal(t, out, out2)
			// A range crossing the shard's end stops at it.
			_ = hi
			tail := make([]float64, 20*width)
			s.AddRange(490, 20, tail)
		})
	}
}

// TestStoreConcurrentAddsExact: 8 goroutines x 10k Adds of exactly
// representable values; the sum must be exact (no lost update).
func TestStoreConcurrentAddsExact(t *testing.T) {
	for _, c := range allStoreCases() {
		t.Run(c.String(), func(t *testing.T) {
			s, d := newTestStore(t, c, 1000, 1, 2, 1, "zero")
			keys := ownedKeys(d, 1, 1000)[:4]
			const G, N = 8, 10000
			var wg sync.WaitGroup
			for g := range G {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 1))
					batch := []uint64{0}
					delta := []float64{0.5}
					for range N {
						batch[0] = keys[r.IntN(len(keys))]
						if r.IntN(2) == 0 {
							s.Add(batch, delta)
						} else {
							s.Add(keys, []float64{0.125, 0.125, 0.125, 0.125})
						}
					}
				})
			}
			wg.Wait()
			out := make([]float64, len(keys))
			s.Get(keys, out)
			// Every op adds exactly 0.5 in total; float32 holds these sums
			// exactly too (< 2^24 quarters).
			var sum float64
			for _, v := range out {
				sum += v
			}
			equal(t, float64(G*N)*0.5, sum)
		})
	}
}

// TestStoreModel compares a Store against a map model under random ops.
func TestStoreModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := rapid.SampledFrom(allStoreCases()).Draw(rt, "case")
		c.dtype = Float64 // exact comparison
		size := rapid.Uint64Range(1, 200).Draw(rt, "size")
		width := rapid.IntRange(1, 4).Draw(rt, "width")
		shards := rapid.IntRange(1, 4).Draw(rt, "shards")
		shard := rapid.IntRange(0, shards-1).Draw(rt, "shard")
		spec := TableSpec{Name: "w", Size: size, Width: width, DType: c.dtype, Storage: c.storage, Partition: c.part, Init: "uniform:1"}.WithDefaults()
		d, _ := NewDirectory(spec, shards)
		s := NewStore(spec, d, shard)
		init, _ := parseInit(spec.Init)
		model := map[uint64][]float64{}
		val := func(k uint64) []float64 {
			if v, ok := model[k]; ok {
				return v
			}
			v := make([]float64, width)
			for col := range v {
				v[col] = init.Value(k, col)
			}
			return v
		}
		for range rapid.IntRange(1, 30).Draw(rt, "ops") {
			keys := rapid.SliceOfN(rapid.Uint64Range(0, size-1), 0, 10).Draw(rt, "keys")
			vals := make([]float64, len(keys)*width)
			for i := range vals {
				vals[i] = float64(rapid.IntRange(-8, 8).Draw(rt, "v"))
			}
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				s.Add(keys, vals)
				for i, k := range keys {
					if d.Owner(k) != shard {
						continue
					}
					v := val(k)
					for col := range v {
						v[col] += vals[i*width+col]
					}
					model[k] = v
				}
			case 1:
				s.Set(keys, vals)
				for i, k := range keys {
					if d.Owner(k) == shard {
						model[k] = append([]float64(nil), vals[i*width:(i+1)*width]...)
					}
				}
			case 2:
				s.Get(keys, vals)
				for i, k := range keys {
					if d.Owner(k) != shard {
						continue
					}
					for col, want := range val(k) {
						if got := vals[i*width+col]; got != want {
							rt.Fatalf("key %d col %d: got %v want %v", k, col, got, want)
						}
					}
				}
			}
		}
		prev := int64(-1)
		s.Range(func(k uint64, v []float64) bool {
			if int64(k) <= prev {
				rt.Fatalf("Range not ascending: %d after %d", k, prev)
			}
			prev = int64(k)
			if d.Owner(k) != shard {
				rt.Fatalf("Range visits foreign key %d", k)
			}
			for col, want := range val(k) {
				if v[col] != want {
					rt.Fatalf("Range key %d col %d: got %v want %v", k, col, v[col], want)
				}
			}
			return true
		})
	})
}

func TestStoreHotPathAllocs(t *testing.T) {
	for _, c := range allStoreCases() {
		s, d := newTestStore(t, c, 10000, 4, 2, 0, "zero")
		keys := ownedKeys(d, 0, 10000)[:100]
		vals := make([]float64, len(keys)*4)
		s.Add(keys, vals) // warm up sparse inserts
		a := testing.AllocsPerRun(50, func() {
			s.Add(keys, vals)
			s.Get(keys, vals)
			s.GetRange(keys[0], 50, vals)
			s.AddRange(keys[0], 50, vals)
		})
		equal(t, 0.0, a, "%v allocates", c)
	}
}

func BenchmarkStoreAdd(b *testing.B) {
	benchStore(b, func(s Store, keys []uint64, vals []float64) { s.Add(keys, vals) })
}

// BenchmarkStoreAddBaseline is the floor for BenchmarkStoreAdd on this
// machine: the same batches added to a bare []float64 with no locks, no
// ownership checks and no hashing. Compare keys/s as a ratio.
func BenchmarkStoreAddBaseline(b *testing.B) {
	const size, batch, nbatches = 100_000, 100, 1024
	r := rand.New(rand.NewPCG(1, 2))
	batches := make([][]uint64, nbatches)
	for i := range batches {
		ks := make([]uint64, batch)
		for j := range ks {
			ks[j] = r.Uint64N(size - batch)
		}
		sortU64(ks)
		batches[i] = ks
	}
	vals := make([]float64, size)
	deltas := make([]float64, batch)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j, k := range batches[i%nbatches] {
			vals[k] += deltas[j]
		}
	}
	b.ReportMetric(float64(b.N)*batch/b.Elapsed().Seconds(), "keys/s")
}

func BenchmarkStoreGet(b *testing.B) {
	benchStore(b, func(s Store, keys []uint64, vals []float64) { s.Get(keys, vals) })
}

func BenchmarkStoreAddRange(b *testing.B) {
	benchStore(b, func(s Store, keys []uint64, vals []float64) { s.AddRange(keys[0], len(keys), vals) })
}

func BenchmarkStoreGetRange(b *testing.B) {
	benchStore(b, func(s Store, keys []uint64, vals []float64) { s.GetRange(keys[0], len(keys), vals) })
}

// benchStore runs op over batches of 100 random keys (sorted within the
// batch, as the client sends them) drawn from 100k keys; range ops use
// 100 consecutive keys. It reports keys/s.
func benchStore(b *testing.B, op func(Store, []uint64, []float64)) {
	const size, batch, nbatches = 100_000, 100, 1024
	for _, st := range []Storage{Sparse, Dense} {
		for _, width := range []int{1, 16, 64} {
			for _, dt := range []DType{Float64, Float32} {
				b.Run(fmt.Sprintf("%s/w%d/%s", st, width, dt), func(b *testing.B) {
					c := storeCase{st, dt, RangePartition}
					s, _ := newTestStore(b, c, size, width, 1, 0, "zero")
					r := rand.New(rand.NewPCG(1, 2))
					batches := make([][]uint64, nbatches)
					for i := range batches {
						ks := make([]uint64, batch)
						for j := range ks {
							ks[j] = r.Uint64N(size - batch)
						}
						sortU64(ks)
						batches[i] = ks
						s.Add(ks, make([]float64, batch*width)) // sparse: insert
					}
					vals := make([]float64, batch*width)
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; b.Loop(); i++ {
						op(s, batches[i%nbatches], vals)
					}
					b.ReportMetric(float64(b.N)*batch/b.Elapsed().Seconds(), "keys/s")
				})
			}
		}
	}
}

func sortU64(ks []uint64) {
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
}

// TestDenseConcurrentRowsWhole: writers add all-ones rows through every
// write path (keyed, range, raw range, raw keyed in the batch's own
// order, small and large calls: one stripe at a time or all of them)
// while readers read through every read path. Each Add changes all columns of a row under one stripe lock,
// so a reader must never see a row whose columns differ (a torn row), and
// the final total must be exact (no lost update).
func TestDenseConcurrentRowsWhole(t *testing.T) {
	for _, dt := range []DType{Float32, Float64} {
		for _, part := range []Partition{RangePartition, HashPartition} {
			t.Run(fmt.Sprintf("%s/%s", dt, part), func(t *testing.T) {
				const size, width = 6000, 8
				N := 300
				if raceEnabled {
					N = 60
				}
				s, d := newTestStore(t, storeCase{Dense, dt, part}, size, width, 2, 0, "zero")
				ds := s.(interface {
					rawAppender
					rawAdder
				})
				keys := ownedKeys(d, 0, size)
				var wg sync.WaitGroup
				var added [4]int64 // rows added per writer
				for g := range 4 {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(uint64(g), 7))
						ones := make([]float64, 600*width)
						for i := range ones {
							ones[i] = 1
						}
						raw := make([]byte, 0, 600*width*8)
						for range N {
							switch g {
							case 0: // sorted keyed Adds spanning stripes
								ks := make([]uint64, 1+r.IntN(200))
								for i := range ks {
									ks[i] = keys[r.IntN(len(keys))]
								}
								sortU64(ks)
								s.Add(ks, ones[:len(ks)*width])
								added[g] += int64(len(ks))
							case 1: // ranges (a hash shard serves them key by key)
								first, n := uint64(r.IntN(size-600)), 1+r.IntN(600)
								s.AddRange(first, n, ones[:n*width])
								added[g] += int64(ownedIn(d, 0, first, n))
							case 2: // raw ranges in the table's dtype, as the server applies them
								first, n := uint64(r.IntN(size-600)), 1+r.IntN(600)
								raw = raw[:0]
								for range n * width {
									if dt == Float32 {
										raw = append(raw, 0, 0, 0x80, 0x3f) // 1.0f
									} else {
										raw = append(raw, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f)
									}
								}
								if !ds.AddRangeRaw(first, n, raw, dt) {
									s.AddRange(first, n, ones[:n*width])
								}
								added[g] += int64(ownedIn(d, 0, first, n))
							case 3: // unsorted float32 deltas as they come off the wire, 1-3 keys or up to 300
								ks := make([]uint64, 1+r.IntN(3))
								if r.IntN(2) == 0 {
									ks = make([]uint64, 1+r.IntN(300))
								}
								raw = raw[:0]
								for i := range ks {
									ks[i] = keys[r.IntN(len(keys))]
									for range width {
										raw = append(raw, 0, 0, 0x80, 0x3f) // 1.0f
									}
								}
								if !ds.AddRaw(ks, raw, Float32) {
									t.Error("AddRaw refused float32 deltas")
									return
								}
								added[g] += int64(len(ks))
							}
						}
					})
				}
				stop := make(chan struct{})
				var readers sync.WaitGroup
				for g := range 2 {
					readers.Go(func() {
						out := make([]float64, len(keys)*width)
						all := make([]float64, size*width)
						var raw []byte
						// Reader 0 reads the keys in no order (every stripe
						// locked at once), reader 1 in order (one at a time).
						mixed := slices.Clone(keys)
						rand.New(rand.NewPCG(uint64(g), 9)).Shuffle(len(mixed), func(i, j int) { mixed[i], mixed[j] = mixed[j], mixed[i] })
						for {
							select {
							case <-stop:
								return
							default:
							}
							if g == 0 {
								s.Get(mixed, out)
							} else {
								s.GetRange(0, size, all) // foreign keys stay zero
								if !checkRowsWhole(t, all, width) {
									return
								}
								raw = ds.AppendRaw(raw[:0], keys)
								rawToFloats(raw, dt, out)
							}
							if !checkRowsWhole(t, out, width) {
								return
							}
						}
					})
				}
				wg.Wait()
				close(stop)
				readers.Wait()
				out := make([]float64, len(keys)*width)
				s.Get(keys, out)
				checkRowsWhole(t, out, width)
				var sum float64
				for _, v := range out {
					sum += v
				}
				equal(t, float64(added[0]+added[1]+added[2]+added[3])*width, sum)
			})
		}
	}
}

func ownedIn(d Directory, shard int, first uint64, n int) int {
	c := 0
	for k := first; k < first+uint64(n); k++ {
		if d.Owner(k) == shard {
			c++
		}
	}
	return c
}

// checkRowsWhole reports a torn row with t.Errorf (it runs on reader
// goroutines, where Fatal is not allowed) and returns false.
func checkRowsWhole(t *testing.T, vals []float64, width int) bool {
	t.Helper()
	for i := 0; i < len(vals); i += width {
		for c := 1; c < width; c++ {
			if vals[i+c] != vals[i] {
				t.Errorf("torn row at %d: %v", i/width, vals[i:i+width])
				return false
			}
		}
	}
	return true
}

func rawToFloats(raw []byte, dt DType, out []float64) {
	for i := range out {
		if dt == Float32 {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		} else {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
		}
	}
}
