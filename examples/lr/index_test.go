package lr

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

// TestBatchIndexModel: over batches of random keys (narrow ranges force
// repeats and probe chains, wide ones spread), Lookup numbers each
// batch's distinct keys in first-seen order, like a map, and forgets the
// previous batch's keys, including across growth and a stamp wrap.
func TestBatchIndexModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var x batchIndex
		hi := rapid.SampledFrom([]uint64{3, 100, 1 << 20, math.MaxUint64}).Draw(rt, "range")
		for b := range rapid.IntRange(1, 8).Draw(rt, "batches") {
			if skip := math.MaxUint32 - uint32(rapid.IntRange(0, 2).Draw(rt, "left")); rapid.Bool().Draw(rt, "nearWrap") && x.stamp < skip {
				x.stamp = skip // as if after billions of batches: slots hold older stamps only
			}
			keys := rapid.SliceOf(rapid.Uint64Range(0, hi)).Draw(rt, "keys")
			x.Reset(len(keys))
			model := map[uint64]int32{}
			for _, k := range keys {
				want, seen := model[k]
				if !seen {
					want = int32(len(model))
					model[k] = want
				}
				got, added := x.Lookup(k, int32(len(model)-1))
				if got != want || added == seen {
					rt.Fatalf("batch %d key %d: got (%d, added %v), want (%d, added %v)", b, k, got, added, want, !seen)
				}
			}
			if 2*len(model) > len(x.slots) {
				rt.Fatalf("batch %d: %d keys in %d slots: load above one half", b, len(model), len(x.slots))
			}
		}
	})
}
