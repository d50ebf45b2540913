package lr

import (
	"math"
	"testing"
)

// TestCenteredPicksDenseFeatures: the features non-zero in at least half
// the rows are centered (mean/std from the sums over all rows), a
// constant feature is left to the intercept, and beyond maxCentered the
// most frequent are kept.
func TestCenteredPicksDenseFeatures(t *testing.T) {
	type stat struct{ sumSq, cnt, sum float64 }
	cases := []struct {
		name  string
		n     float64
		stats []stat
		want  []uint64
	}{
		{"none seen", 0, []stat{{4, 2, 2}}, nil},
		{"half the rows", 10, []stat{{10, 5, 5}, {10, 4, 4}, {50, 10, 20}}, []uint64{0, 2}},
		{"constant", 10, []stat{{40, 10, 20}, {30, 10, 10}}, []uint64{1}},
		{"sparse only", 100, []stat{{3, 3, 3}, {7, 7, 7}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := centered(c.n, func(k uint64) (float64, float64, float64) {
				s := c.stats[k]
				return s.sumSq, s.cnt, s.sum
			}, uint64(len(c.stats)))
			if len(got.Keys) != len(c.want) {
				t.Fatalf("centered %v, want %v", got.Keys, c.want)
			}
			norm := 0.0
			for j, k := range got.Keys {
				if k != c.want[j] {
					t.Fatalf("centered %v, want %v", got.Keys, c.want)
				}
				s := c.stats[k]
				m := s.sum / c.n
				sd := math.Sqrt(s.sumSq/c.n - m*m)
				if math.Abs(got.Inv[j]-1/sd) > 1e-12 || math.Abs(got.C[j]-m/sd) > 1e-12 {
					t.Fatalf("key %d: inv %v c %v, want %v %v", k, got.Inv[j], got.C[j], 1/sd, m/sd)
				}
				norm += got.C[j] * got.C[j]
			}
			if math.Abs(got.NormC-norm) > 1e-12 {
				t.Fatalf("NormC %v, want %v", got.NormC, norm)
			}
		})
	}
	t.Run("cap keeps the most frequent", func(t *testing.T) {
		const size = maxCentered + 10
		got := centered(100, func(k uint64) (float64, float64, float64) {
			cnt := float64(50 + k%40) // every key dense; counts 50..89
			return cnt * 4, cnt, cnt * 1.5
		}, size)
		if len(got.Keys) != maxCentered {
			t.Fatalf("%d centered, want %d", len(got.Keys), maxCentered)
		}
		kept := map[uint64]bool{}
		minKept := uint64(math.MaxUint64)
		for j, k := range got.Keys {
			if j > 0 && k <= got.Keys[j-1] {
				t.Fatalf("keys not increasing at %d: %v", j, got.Keys[j-1:j+1])
			}
			kept[k] = true
			minKept = min(minKept, 50+k%40)
		}
		for k := uint64(0); k < size; k++ {
			if !kept[k] && 50+k%40 > minKept {
				t.Fatalf("key %d (count %d) dropped while a key of count %d is kept", k, 50+k%40, minKept)
			}
		}
	})
}
