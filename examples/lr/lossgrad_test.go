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
