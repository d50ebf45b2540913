package kvstore

import (
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestSlotHashInverts(t *testing.T) {
	for _, k := range []uint64{0, 1, 2, 7919, 1 << 40, math.MaxUint64 - 1} {
		h := hashKey(k)
		check(t, h != 0, "key %d hashes to the empty mark", k)
		equal(t, k, unhashKey(h))
	}
	equal(t, uint64(1), uint64(slotMul)*slotMulInv)
}

// keyOfHash is the key that hashKey maps to h (h != 0).
func keyOfHash(h uint64) uint64 { return unhashKey(h) }

// checkTable verifies a rowTable's invariants: hashes ascend, each entry
// sits at or after its home with no empty slot in between (so seek finds
// it), the last slot is empty, the count is right, and the probe window
// fits.
func checkTable[P float](t *rapid.T, tb *rowTable[P]) {
	n, prev, lastEmpty := 0, uint64(0), -1
	for i, h := range tb.keys {
		if h == 0 {
			lastEmpty = i
			continue
		}
		n++
		if h <= prev {
			t.Fatalf("slot %d: hash %x after %x", i, h, prev)
		}
		prev = h
		if home := tb.home(h); home > i || lastEmpty >= home {
			t.Fatalf("slot %d: home %d, last empty slot before it %d", i, home, lastEmpty)
		}
	}
	if tb.keys[len(tb.keys)-1] != 0 {
		t.Fatalf("the last slot is not empty")
	}
	if n != tb.n {
		t.Fatalf("n = %d, %d slots full", tb.n, n)
	}
	if n > tb.limit || tb.level >= 0 && int(tb.homes)+tablePad > len(tb.keys) {
		t.Fatalf("%d keys, limit %d, %d homes in %d slots", n, tb.limit, tb.homes, len(tb.keys))
	}
}

// The table against a Go map: inserts (with growth and end-of-array
// extension), lookups of held and absent keys, row contents moving with
// their keys, over keys that include 0, MaxUint64-1, runs of keys whose
// hashes are consecutive (one home slot: the longest runs there are), and
// keys whose hashes crowd the top of the range (the run reaches the end
// of the array).
func TestRowTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const stride = 3
		tb := newRowTable[float64](stride, rapid.Float64Range(0, 1).Draw(t, "phase"))
		model := map[uint64]float64{}
		base := rapid.Uint64Min(1).Draw(t, "base")
		genKey := rapid.OneOf(
			rapid.SampledFrom([]uint64{0, 1, math.MaxUint64 - 1, math.MaxUint64 - 2}),
			rapid.Uint64Range(0, math.MaxUint64-1),
			rapid.Uint64Range(0, 64),
			// Colliding: hashes base, base+1, ... share a home slot.
			rapid.Custom(func(t *rapid.T) uint64 {
				h := base + rapid.Uint64Range(0, 200).Draw(t, "off")
				if h == 0 {
					h = 1
				}
				return keyOfHash(h)
			}),
			// Crowding the top of the hash range (the last home slots).
			rapid.Custom(func(t *rapid.T) uint64 {
				return keyOfHash(math.MaxUint64 - rapid.Uint64Range(0, 300).Draw(t, "top"))
			}),
		)
		row := func(k uint64, v float64) []float64 { return []float64{v, float64(k % 1000), -v} }
		steps := rapid.IntRange(1, 1500).Draw(t, "steps")
		for i := range steps {
			k := genKey.Draw(t, "key")
			h := hashKey(k)
			j := tb.seek(h)
			want, held := model[k]
			if found := tb.keys[j] == h; found != held {
				t.Fatalf("step %d: key %d found %v, held %v", i, k, found, held)
			}
			if held && !slices.Equal(tb.row(j), row(k, want)) {
				t.Fatalf("step %d: key %d row %v, want %v", i, k, tb.row(j), row(k, want))
			}
			if rapid.IntRange(0, 3).Draw(t, "op") == 0 { // a lookup only
				continue
			}
			if !held {
				j = tb.insert(j, h)
			}
			model[k] = want + 1
			copy(tb.row(j), row(k, want+1))
			if i%50 == 0 {
				checkTable(t, &tb)
			}
		}
		checkTable(t, &tb)
		for k, v := range model {
			j := tb.seek(hashKey(k))
			if tb.keys[j] != hashKey(k) || !slices.Equal(tb.row(j), row(k, v)) {
				t.Fatalf("key %d lost or its row %v, want %v", k, tb.row(j), row(k, v))
			}
		}
		var keys []uint64
		for _, h := range tb.keys {
			if h != 0 {
				keys = append(keys, unhashKey(h))
			}
		}
		if len(keys) != len(model) {
			t.Fatalf("%d keys in the table, %d in the model", len(keys), len(model))
		}
		for _, k := range keys {
			if _, ok := model[k]; !ok {
				t.Fatalf("key %d in the table only", k)
			}
		}
	})
}

// Hashes crowding the top of the range pile up in the last home slot and
// run past the homes into the pad: inserts extend the array, and every
// growth step must make room for the whole run again.
func TestRowTableCrowdedTop(t *testing.T) {
	tb := newRowTable[float32](1, 0.5)
	model := map[uint64]float32{}
	for i := range uint64(3000) {
		k := keyOfHash(math.MaxUint64 - i) // one home slot whatever the size
		if i%2 == 1 {
			k = i * 7919
		}
		j := tb.seek(hashKey(k))
		must(t, tb.keys[j] != hashKey(k), "key %d found before its insert", k)
		j = tb.insert(j, hashKey(k))
		tb.vals[j] = float32(i)
		model[k] = float32(i)
	}
	for k, v := range model {
		j := tb.seek(hashKey(k))
		must(t, tb.keys[j] == hashKey(k), "key %d lost", k)
		equal(t, v, tb.vals[j], "key %d", k)
	}
	equal(t, len(model), tb.n)
	must(t, len(tb.keys) > int(tb.homes)+1500, "the run of 1500 top hashes lies past the homes")
}
