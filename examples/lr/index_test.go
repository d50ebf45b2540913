package lr

import (
	"math"
	"testing"

	"github.com/flexps/flexps/datastore"
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

// TestMergedKeys: collect under MiniBatch.Merge (the hogwild kind) gives
// every occurrence a position whose key is the occurrence's, at most one
// position per occurrence, and merges a key repeated with no other key in
// between (the filter has just seen it), batch after batch, also when
// the filter's batch counter wraps; centered batches take exact distinct
// keys.
func TestMergedKeys(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := &MiniBatch{Merge: true}
		if rapid.Bool().Draw(rt, "nearWrap") {
			m.merge.cur = math.MaxUint32 - 1
		}
		if rapid.Bool().Draw(rt, "centered") {
			m.cent = &Centered{Keys: []uint64{1, 2}}
		}
		hi := rapid.SampledFrom([]uint64{3, 100, 1 << 20, math.MaxUint64}).Draw(rt, "range")
		for b := range rapid.IntRange(1, 5).Draw(rt, "batches") {
			r := &datastore.Records{}
			for range rapid.IntRange(1, 8).Draw(rt, "rows") {
				r.Append(1, rapid.SliceOfN(rapid.Uint64Range(0, hi), 0, 10).Draw(rt, "keys"), nil)
			}
			center := rapid.Bool().Draw(rt, "center")
			var st batchState
			m.collect(&st, r, 0, r.Len(), center)
			occ := r.Keys
			if len(st.pos) != len(occ) || len(st.keys) > len(occ)+2 {
				rt.Fatalf("batch %d: %d positions, %d keys for %d occurrences", b, len(st.pos), len(st.keys), len(occ))
			}
			for j, k := range occ {
				if p := st.pos[j]; p < 0 || int(p) >= len(st.keys) || st.keys[p] != k {
					rt.Fatalf("batch %d occurrence %d: key %d at position %d of %v", b, j, k, p, st.keys)
				}
				if j > 0 && occ[j-1] == k && st.pos[j-1] != st.pos[j] {
					rt.Fatalf("batch %d: key %d repeated at once, positions %d and %d", b, k, st.pos[j-1], st.pos[j])
				}
			}
			if center && m.cent != nil {
				seen := map[uint64]bool{}
				for _, k := range st.keys {
					if seen[k] {
						rt.Fatalf("batch %d: centered, key %d twice in %v", b, k, st.keys)
					}
					seen[k] = true
				}
			}
		}
	})
}
