package lr

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

// TestInvTableMatchesFloat64s: whatever values are set, in whatever
// order, lookup returns exactly (bit for bit) what a plain []float64
// would, through the byte, 2-byte and float64 forms.
func TestInvTableMatchesFloat64s(t *testing.T) {
	cases := []struct {
		name     string
		distinct int // distinct values set (besides the initial 1)
		form     string
	}{
		{"binary features", 0, "i8"},
		{"a few scales", 200, "i8"},
		{"past a byte", 256, "i16"},
		{"past two bytes", 1 << 16, "f64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			size := uint64(c.distinct + 1000)
			tab := newInvTable(size)
			want := make([]float64, size)
			for k := range want {
				want[k] = 1
			}
			for i := range c.distinct {
				k := uint64(i) * 7 % size
				v := 1 / math.Sqrt(float64(i+2))
				tab.set(k, v)
				want[k] = v
			}
			negZero := math.Copysign(0, -1)
			tab.set(size-1, negZero) // a value equal to 0 but not by its bits
			want[size-1] = negZero
			tab.set(size-2, 0)
			want[size-2] = 0
			form := map[bool]string{true: "i8"}[tab.i8 != nil]
			if tab.i16 != nil {
				form = "i16"
			} else if tab.f64 != nil {
				form = "f64"
			}
			if form != c.form {
				t.Fatalf("form %s, want %s", form, c.form)
			}
			checkInv(t, tab, want)
		})
	}
}

func TestInvTableProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.Uint64Range(1, 600).Draw(t, "size")
		tab := newInvTable(size)
		want := make([]float64, size)
		for k := range want {
			want[k] = 1
		}
		// A value pool small or large enough to cross the byte form.
		pool := rapid.IntRange(1, 400).Draw(t, "pool")
		for range rapid.IntRange(0, 800).Draw(t, "sets") {
			k := rapid.Uint64Range(0, size-1).Draw(t, "k")
			v := 1 / float64(rapid.IntRange(1, pool).Draw(t, "v"))
			tab.set(k, v)
			want[k] = v
		}
		checkInv(t, tab, want)
	})
}

func checkInv(t interface{ Fatalf(string, ...any) }, tab *invTable, want []float64) {
	keys := make([]uint64, len(want))
	for k := range keys {
		keys[k] = uint64(len(keys) - 1 - k) // any order
	}
	got := make([]float64, len(keys))
	tab.lookup(keys, got)
	for i, k := range keys {
		if math.Float64bits(got[i]) != math.Float64bits(want[k]) {
			t.Fatalf("key %d: %v, want %v", k, got[i], want[k])
		}
	}
}

// TestScaleAccMatchesMap: the statistics scaleAcc gathers are bit for bit
// those of a plain map summing in the same order, whether the values stay
// binary (counts), turn non-binary part way (counts moved to the map) or
// the table is too large for counts.
func TestScaleAccMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.SampledFrom([]uint64{50, maxLoadedScales + 1}).Draw(t, "size")
		acc := newScaleAcc(size)
		want := map[uint64]*[ScaleWidth]float64{}
		binaryUntil := rapid.IntRange(0, 300).Draw(t, "binaryUntil")
		for i := range rapid.IntRange(0, 300).Draw(t, "n") {
			k := rapid.Uint64Range(0, 49).Draw(t, "k")
			v := 1.0
			if i >= binaryUntil {
				v = rapid.SampledFrom([]float64{1, -1, 0.1, 3, 1e-300, 0.7}).Draw(t, "v")
			}
			acc.add(k, v)
			s := want[k]
			if s == nil {
				s = new([ScaleWidth]float64)
				want[k] = s
			}
			s[0] += v * v
			s[1]++
			s[2] += v
		}
		prev, n := -1, 0
		acc.each(func(k uint64, s *[ScaleWidth]float64) {
			if int(k) <= prev {
				t.Fatalf("key %d after %d", k, prev)
			}
			prev = int(k)
			n++
			w := want[k]
			if w == nil {
				t.Fatalf("key %d never added", k)
			}
			for i := range s {
				if math.Float64bits(s[i]) != math.Float64bits(w[i]) {
					t.Fatalf("key %d: %v, want %v", k, *s, *w)
				}
			}
		})
		if n != len(want) {
			t.Fatalf("%d keys, want %d", n, len(want))
		}
	})
}
