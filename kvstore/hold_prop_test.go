package kvstore

import (
	"testing"

	"pgregory.net/rapid"
)

// TestHeldAddsMatchSums: whatever Adds are merged (repeated keys, keys
// colliding in the index, growth, resets), each held key's deltas are the
// sum of what was added to it, every key is held once, in first-add order.
func TestHeldAddsMatchSums(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		width := rapid.IntRange(1, 4).Draw(rt, "width")
		var h heldAdds
		model := map[uint64][]float64{}
		var order []uint64
		// Keys from a small set (repeats) or anywhere (0 and MaxUint64 included).
		key := rapid.OneOf(rapid.Uint64Range(0, 40), rapid.Uint64(), rapid.SampledFrom([]uint64{0, 1<<64 - 1, 1 << 63}))
		for range rapid.IntRange(1, 30).Draw(rt, "calls") {
			if rapid.IntRange(0, 9).Draw(rt, "reset") == 0 {
				h.reset()
				model, order = map[uint64][]float64{}, nil
				continue
			}
			keys := rapid.SliceOfN(key, 0, 50).Draw(rt, "keys")
			deltas := make([]float64, len(keys)*width)
			for i := range deltas {
				deltas[i] = float64(rapid.IntRange(-8, 8).Draw(rt, "delta")) // exact in float64
			}
			h.add(keys, deltas, width)
			for i, k := range keys {
				if model[k] == nil {
					model[k] = make([]float64, width)
					order = append(order, k)
				}
				for c := range width {
					model[k][c] += deltas[i*width+c]
				}
			}
		}
		if len(h.keys) != len(order) || len(h.vals) != len(order)*width {
			rt.Fatalf("held %d keys / %d values, want %d keys", len(h.keys), len(h.vals), len(order))
		}
		for p, k := range h.keys {
			if k != order[p] {
				rt.Fatalf("position %d holds key %d, want %d", p, k, order[p])
			}
			for c := range width {
				if got, want := h.vals[p*width+c], model[k][c]; got != want {
					rt.Fatalf("key %d value %d: %v, want %v", k, c, got, want)
				}
			}
		}
	})
}
