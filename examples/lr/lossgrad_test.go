package lr

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLossGradMatchesLogLossAndSigmoid: Step's one-exponential loss and
// gradient are LogLoss(z, y) and Sigmoid(z) - y bit for bit, at the
// branch edges (signed zeros, infinities, NaN, where exp under- and
// overflows) and at random margins.
func TestLossGradMatchesLogLossAndSigmoid(t *testing.T) {
	zs := []float64{0, math.Copysign(0, -1), 1e-300, -1e-300, 0.5, -0.5, 1, -1, 36.7, -36.7, 709, -709, 745.2, -745.2, 1e308, -1e308,
		math.Inf(1), math.Inf(-1), math.NaN(), math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		zs = append(zs, rng.NormFloat64()*math.Pow(10, float64(rng.IntN(6)-2)))
	}
	same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) || (a != a && b != b) }
	for _, z := range zs {
		for _, y := range []float64{0, 1} {
			loss, g := LossGrad(z, y)
			if wl, wg := LogLoss(z, y), Sigmoid(z)-y; !same(loss, wl) || !same(g, wg) {
				t.Fatalf("LossGrad(%v, %v) = %v, %v; want LogLoss %v, Sigmoid - y %v", z, y, loss, g, wl, wg)
			}
		}
	}
}

// TestLossSumMatchesLogLoss: a batch's loss summed through lossSum (one
// logarithm of the product of the 1 + e) is the sum of LogLoss within
// float64 rounding, for batches small and long enough to pass the
// product's overflow guard (margins near 0 double the product at every
// record), and a NaN or infinite loss still makes the sum NaN or infinite.
func TestLossSumMatchesLogLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name  string
		n     int
		scale float64
	}{{"one", 1, 1}, {"batch", 100, 3}, {"near zero", 5000, 1e-3}, {"wide", 3000, 40}, {"tiny e", 200, 800}} {
		t.Run(tc.name, func(t *testing.T) {
			var l lossSum
			want, abs := 0.0, 0.0
			for range tc.n {
				z, y := rng.NormFloat64()*tc.scale, float64(rng.IntN(2))
				h, e, _ := lossParts(z, y)
				l.add(h, e)
				w := LogLoss(z, y)
				want += w
				abs += math.Abs(w)
			}
			if got := l.total(); math.Abs(got-want) > 1e-12*abs+float64(tc.n)*2e-16 {
				t.Fatalf("lossSum %v, LogLoss sum %v (n %d)", got, want, tc.n)
			}
		})
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1)} { // label 0: the loss of +Inf is +Inf
		var l lossSum
		for _, z := range []float64{0.5, bad, -2} {
			h, e, _ := lossParts(z, 0)
			l.add(h, e)
		}
		if got := l.total(); !(math.IsNaN(got) && math.IsNaN(bad)) && !math.IsInf(got, 1) {
			t.Fatalf("margin %v: loss sum %v, want NaN or +Inf", bad, got)
		}
	}
}
