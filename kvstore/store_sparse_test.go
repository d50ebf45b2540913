package kvstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkSparseStore1M is a sparse shard past the last-level cache: 1M
// keys spread over a 2^40 key space, read and added in sorted batches of
// 100 keys drawn from the held ones (a worker's Get and Add of a
// minibatch's features). It reports keys/s.
func BenchmarkSparseStore1M(b *testing.B) {
	const held, batch, nbatches = 1 << 20, 100, 4096
	for _, dt := range []DType{Float32, Float64} {
		s, _ := newTestStore(b, storeCase{Sparse, dt, HashPartition}, 1<<40, 1, 1, 0, "zero")
		keys := make([]uint64, held)
		for i := range keys {
			keys[i] = (uint64(i) * 0x9e3779b97f4a7c15) & (1<<40 - 1) // distinct
		}
		for i := 0; i < held; i += 1024 {
			s.Add(keys[i:i+1024], make([]float64, 1024))
		}
		r := rand.New(rand.NewPCG(1, 2))
		benchGetAdd(b, s, randomBatches(r, keys, nbatches, batch), 1, string(dt))
	}
}

// randomBatches draws n sorted batches of size keys from keys.
func randomBatches(r *rand.Rand, keys []uint64, n, size int) [][]uint64 {
	batches := make([][]uint64, n)
	for i := range batches {
		ks := make([]uint64, size)
		for j := range ks {
			ks[j] = keys[r.IntN(len(keys))]
		}
		sortU64(ks)
		batches[i] = ks
	}
	return batches
}

// benchGetAdd runs s.Get and s.Add over batches in turn, as sub-benchmarks
// "Get/<label>" and "Add/<label>", reporting keys/s.
func benchGetAdd(b *testing.B, s Store, batches [][]uint64, width int, label string) {
	vals := make([]float64, len(batches[0])*width)
	for _, op := range []struct {
		name string
		fn   func([]uint64, []float64)
	}{{"Get", s.Get}, {"Add", s.Add}} {
		b.Run(op.name+"/"+label, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				op.fn(batches[i%len(batches)], vals)
			}
			b.ReportMetric(float64(b.N)*float64(len(batches[0]))/b.Elapsed().Seconds(), "keys/s")
		})
	}
}

// BenchmarkSparseStoreWide is BenchmarkStoreGet/Add's sparse shard of
// 100k keys with wide rows, read and added in batches drawn at random from
// the held keys rather than in the batches that inserted them (whose rows
// an append-order slab would keep side by side).
func BenchmarkSparseStoreWide(b *testing.B) {
	const held, batch, nbatches = 100_000, 100, 1024
	for _, width := range []int{16, 64} {
		s, _ := newTestStore(b, storeCase{Sparse, Float32, RangePartition}, held, width, 1, 0, "zero")
		keys := make([]uint64, held)
		for i := range keys {
			keys[i] = uint64(i)
		}
		r := rand.New(rand.NewPCG(1, 2))
		r.Shuffle(held, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		for i := 0; i < held; i += 1000 {
			s.Add(keys[i:i+1000], make([]float64, 1000*width))
		}
		benchGetAdd(b, s, randomBatches(r, keys, nbatches, batch), width, fmt.Sprintf("w%d/float32", width))
	}
}

// BenchmarkSparseStoreInsert fills a fresh sparse shard with 200k keys in
// batches of 100 (first touches of an embedding table): the cost of
// inserts and table growth. It reports keys/s.
func BenchmarkSparseStoreInsert(b *testing.B) {
	const n, batch = 200_000, 100
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = (uint64(i) * 0x9e3779b97f4a7c15) & (1<<40 - 1)
	}
	for _, width := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("w%d/float32", width), func(b *testing.B) {
			vals := make([]float64, batch*width)
			b.ReportAllocs()
			for b.Loop() {
				s, _ := newTestStore(b, storeCase{Sparse, Float32, HashPartition}, 1<<40, width, 1, 0, "zero")
				for i := 0; i < n; i += batch {
					s.Add(keys[i:i+batch], vals)
				}
			}
			b.ReportMetric(float64(b.N)*n/b.Elapsed().Seconds(), "keys/s")
		})
	}
}
