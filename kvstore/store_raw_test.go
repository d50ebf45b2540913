package kvstore

import (
	"fmt"
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
