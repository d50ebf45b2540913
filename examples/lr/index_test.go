package lr

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

// TestBatchIndexModel: over batches of random keys (narrow ranges force
// repeats and probe chains, wide ones spread), Lookup numbers each
// batch's distinct keys in first-seen order, like a map, and forgets the
// previous batch's keys, including across growth and shrinking. Keys that
// share a fingerprint (a narrow range, or keys equal in the hash bits the
// fingerprint takes) are told apart by the key itself.
func TestBatchIndexModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var x batchIndex
		hi := rapid.SampledFrom([]uint64{3, 100, 1 << 20, math.MaxUint64}).Draw(rt, "range")
		for b := range rapid.IntRange(1, 8).Draw(rt, "batches") {
			keys := rapid.SliceOf(rapid.Uint64Range(0, hi)).Draw(rt, "keys")
			if rapid.Bool().Draw(rt, "sameFingerprint") {
				// Keys whose hashes differ only outside the fingerprint's
				// bits: k * fib mod 2^64 moves by multiples of 2^48.
				for i := range keys {
					keys[i] = uint64(i%4) * (1 << 48) * 0xf1de83e19937733d // fib's inverse mod 2^64
				}
			}
			x.Reset(len(keys))
			model := map[uint64]int32{}
			var distinct []uint64
			for _, k := range keys {
				want, seen := model[k]
				if !seen {
					want = int32(len(model))
					model[k] = want
				}
				got, added := x.Lookup(k, int32(len(distinct)), distinct)
				if added {
					distinct = append(distinct, k)
				}
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
