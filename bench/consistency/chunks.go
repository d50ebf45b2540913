package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexps/flexps/kvstore"
)

// chunkResult is one LocalTable lock mode at one goroutine count.
type chunkResult struct {
	Section    string  `json:"section"` // chunks
	Mode       string  `json:"mode"`
	ChunkSize  int     `json:"chunk_size,omitempty"`
	Goroutines int     `json:"goroutines"`
	Batches    int64   `json:"batches"`
	KeysPerS   float64 `json:"keys_per_s"` // keys of Get+Add pairs per second (a batch of k keys counts k)
}

type lockMode struct {
	name  string
	mode  kvstore.LockMode
	chunk int
}

// zipfBatches draws batches of sorted distinct keys like LR mini-batches:
// draws Zipf(1.1)-ranked ids per batch, mapped through a fixed random
// permutation so hot keys spread over the table (as the generator does).
func zipfBatches(dim, draws, count int, seed uint64) [][]uint64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	perm := make([]uint64, dim)
	for i := range perm {
		perm[i] = uint64(i)
	}
	rng.Shuffle(dim, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	z := rand.NewZipf(rng, 1.1, 1, uint64(dim-1))
	out := make([][]uint64, count)
	seen := map[uint64]bool{}
	for b := range out {
		clear(seen)
		var ks []uint64
		for range draws {
			k := perm[z.Uint64()]
			if !seen[k] {
				seen[k] = true
				ks = append(ks, k)
			}
		}
		slices.Sort(ks)
		out[b] = ks
	}
	return out
}

func chunksAll(o options) []chunkResult {
	modes := []lockMode{
		{"chunk locks", kvstore.ChunkLocks, 1},
		{"chunk locks", kvstore.ChunkLocks, 64},
		{"chunk locks", kvstore.ChunkLocks, 4096},
		{"global lock", kvstore.GlobalLock, 1},
		{"no locks", kvstore.NoLocks, 1},
	}
	// Each goroutine cycles its own batches, as each worker trains on its
	// own share of the data.
	batches := [][][]uint64{zipfBatches(o.chunkDim, o.chunkBatch, 512, 1), zipfBatches(o.chunkDim, o.chunkBatch, 512, 2)}
	var out []chunkResult
	for _, m := range modes {
		for _, g := range []int{1, 2} {
			out = append(out, chunkRun(o, m, g, batches))
		}
	}
	return out
}

func chunkRun(o options, m lockMode, goroutines int, batches [][][]uint64) chunkResult {
	t, err := kvstore.NewLocalTable(kvstore.TableSpec{Name: "w", Size: uint64(o.chunkDim), Storage: kvstore.Dense}, m.mode, m.chunk)
	if err != nil {
		panic(err) // the specs above are valid
	}
	var stop atomic.Bool
	var keys, count atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := batches[g%len(batches)]
			vals := make([]float64, o.chunkBatch)
			var n, k int64
			for i := 0; !stop.Load(); i++ {
				ks := mine[i%len(mine)]
				v := vals[:len(ks)]
				t.Get(ks, v)
				for j := range v {
					v[j] = 0.001 * (0.5 - v[j])
				}
				t.Add(ks, v)
				n++
				k += int64(len(ks))
			}
			keys.Add(k)
			count.Add(n)
		}()
	}
	time.Sleep(o.chunkDuration)
	stop.Store(true)
	wg.Wait()
	secs := time.Since(start).Seconds()
	r := chunkResult{Section: "chunks", Mode: m.mode.String(), Goroutines: goroutines, Batches: count.Load(), KeysPerS: float64(keys.Load()) / secs}
	if m.mode == kvstore.ChunkLocks {
		r.ChunkSize = m.chunk
	}
	return r
}

func reportChunks(o options, rs []chunkResult) {
	fmt.Println()
	fmt.Printf("## chunks: kvstore.LocalTable, dense, %d keys; each goroutine does Get then Add of sorted batches (%d Zipf(1.1) draws, distinct keys), %v per row\n",
		o.chunkDim, o.chunkBatch, o.chunkDuration)
	var noLocks2 float64
	one := map[string]float64{}
	for _, r := range rs {
		if r.Mode == kvstore.NoLocks.String() && r.Goroutines == 2 {
			noLocks2 = r.KeysPerS
		}
		if r.Goroutines == 1 {
			one[fmt.Sprint(r.Mode, r.ChunkSize)] = r.KeysPerS
		}
	}
	fmt.Printf("%-12s %6s %3s %14s %10s %14s\n", "mode", "chunk", "g", "keys/s", "2g / 1g", "vs no locks 2g")
	for _, r := range rs {
		chunk, scale, vs := "-", "-", "-"
		if r.ChunkSize > 0 {
			chunk = fmt.Sprint(r.ChunkSize)
		}
		if b := one[fmt.Sprint(r.Mode, r.ChunkSize)]; r.Goroutines > 1 && b > 0 {
			scale = fmt.Sprintf("%.2fx", r.KeysPerS/b)
		}
		if r.Goroutines == 2 && noLocks2 > 0 {
			vs = fmt.Sprintf("%.2f", r.KeysPerS/noLocks2)
		}
		fmt.Printf("%-12s %6s %3d %14.0f %10s %14s\n", r.Mode, chunk, r.Goroutines, r.KeysPerS, scale, vs)
	}
	fmt.Println("keys/s counts each key of a Get+Add pair once. no_locks is hogwild (atomic CAS per value): the reference, not a mode with guarantees.")
}
