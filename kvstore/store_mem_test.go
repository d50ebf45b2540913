package kvstore

import (
	"fmt"
	"runtime"
	"testing"
)

// Memory bounds of a shard, per stored parameter, as README states them:
// a dense shard is its value array plus one padded stripe lock per ~16k
// values; a sparse shard pays for its hash slots (16 bytes each, at most
// 3/4 full, doubling) and value rows (grown by append) on top of the
// values. These are the documented bounds the test enforces (README,
// Performance). The sparse bound is the layout's today (33-46 bytes per key
// measured), not yet issue 15's target of 16: that needs slots of a 4-byte
// row index over key/value rows grown by less than doubling.
const (
	denseF32Bound  = 4.2  // bytes per float32 parameter
	denseF64Bound  = 8.2  // bytes per float64 parameter
	sparseF32Bound = 16.0 // bytes per present key, width 1, float32
)

// heapDelta is the live heap that mk's result holds.
func heapDelta(mk func() any) float64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	v := mk()
	runtime.GC()
	runtime.ReadMemStats(&b)
	runtime.KeepAlive(v)
	return float64(int64(b.HeapAlloc) - int64(a.HeapAlloc))
}

func TestStoreBytesPerParameter(t *testing.T) {
	const size = 1 << 21
	for _, tc := range []struct {
		dtype DType
		width int
		bound float64
	}{
		{Float32, 1, denseF32Bound},
		{Float32, 64, denseF32Bound},
		{Float64, 1, denseF64Bound},
	} {
		t.Run(fmt.Sprintf("dense/%s/w%d", tc.dtype, tc.width), func(t *testing.T) {
			keys := uint64(size / tc.width)
			bytes := heapDelta(func() any {
				s, _ := newTestStore(t, storeCase{Dense, tc.dtype, RangePartition}, keys, tc.width, 1, 0, "zero")
				return s
			})
			per := bytes / float64(keys*uint64(tc.width))
			t.Logf("%.3f bytes per parameter", per)
			if per > tc.bound {
				t.Fatalf("dense %s shard: %.3f bytes per parameter, bound %.1f", tc.dtype, per, tc.bound)
			}
		})
	}
	for _, n := range []int{100_000, 300_000} { // just after and well before a slot table doubles
		t.Run(fmt.Sprintf("sparse/float32/%dkeys", n), func(t *testing.T) {
			var s Store
			bytes := heapDelta(func() any {
				s, _ = newTestStore(t, storeCase{Sparse, Float32, HashPartition}, 1<<40, 1, 1, 0, "zero")
				keys := make([]uint64, 1024)
				one := make([]float64, 1024)
				for i := 0; i < n; i += len(keys) {
					for j := range keys {
						keys[j] = uint64(i+j) * 7919 // spread over the key space
					}
					s.Add(keys[:min(len(keys), n-i)], one[:min(len(keys), n-i)])
				}
				return s
			})
			per := bytes / float64(s.Len())
			t.Logf("%d keys, %.1f bytes per present key", s.Len(), per)
			if per > sparseF32Bound {
				t.Fatalf("sparse shard: %.1f bytes per present key, bound %.0f", per, sparseF32Bound)
			}
		})
	}
}
