package svrg

import (
	"math"
	"math/big"
	"testing"
)

// step.weight recovers w_k = w*_k + a^t (v - w*_k) from the table's v
// without losing w's digits when w*_k = snap_k - mu_k/l2 dwarfs w_k: raw
// features in the billions (breast cancer times 1e6) make w*_k ~1e10 for
// weights of ~1e-6, and subtracting it lost every digit of w (the inner
// stages then climbed, objective 0.69 to 170 over 8 rounds, exit 0).
func TestWeightKeepsPrecisionWhenWStarDwarfsW(t *testing.T) {
	for _, tc := range []struct {
		name           string
		w, wstar, loga float64
		t              float64
	}{
		{"comparable", 0.3, -2, -1e-3, 500},
		{"at step 0", 0.7, 5e9, -1e-18, 0},
		{"w* 1e16 times w", 1e-6, 1e10, -1e-20, 1000},
		{"w* -1e19 times w", -3e-7, -4e12, -1e-22, 37},
		{"decay", 2e-5, 3e-4, -0.01, 800},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := tc.t * tc.loga
			a, b := math.Exp(tl), -math.Expm1(tl) // a^t and 1 - a^t
			// v, the table's value for w at step t: (w - (1 - a^t) w*) / a^t,
			// exactly, then rounded once.
			bf := func(x float64) *big.Float { return new(big.Float).SetPrec(256).SetFloat64(x) }
			num := new(big.Float).SetPrec(256).Sub(bf(tc.w), new(big.Float).SetPrec(256).Mul(bf(b), bf(tc.wstar)))
			v, _ := new(big.Float).SetPrec(256).Quo(num, bf(a)).Float64()
			s := &step{loga: []float64{tc.loga}, wstar: []float64{tc.wstar}}
			got := s.weight(0, v, tc.t)
			if math.Abs(got-tc.w) > 1e-12*math.Abs(tc.w) {
				t.Fatalf("weight = %g, want %g (relative error %.2g)", got, tc.w, math.Abs(got-tc.w)/math.Abs(tc.w))
			}
		})
	}
}
