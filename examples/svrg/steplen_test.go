package svrg

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/examples/lr"
)

// jacobiMax is the largest eigenvalue of the symmetric matrix a (n x n,
// row-major) by cyclic Jacobi rotations: an independent check of
// curvature's power iteration.
func jacobiMax(a []float64, n int) float64 {
	for range 100 {
		off := 0.0
		for p := range n {
			for q := p + 1; q < n; q++ {
				off += a[p*n+q] * a[p*n+q]
				if math.Abs(a[p*n+q]) < 1e-300 {
					continue
				}
				theta := (a[q*n+q] - a[p*n+p]) / (2 * a[p*n+q])
				t := math.Copysign(1, theta) / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				c := 1 / math.Sqrt(t*t+1)
				s := t * c
				for k := range n {
					akp, akq := a[k*n+p], a[k*n+q]
					a[k*n+p], a[k*n+q] = c*akp-s*akq, s*akp+c*akq
				}
				for k := range n {
					apk, aqk := a[p*n+k], a[q*n+k]
					a[p*n+k], a[q*n+k] = c*apk-s*aqk, s*apk+c*aqk
				}
			}
		}
		if off < 1e-24 {
			break
		}
	}
	best := math.Inf(-1)
	for i := range n {
		best = max(best, a[i*n+i])
	}
	return best
}

// TestCurvatureMatchesDenseEigenvalue: curvature's matrix-free power
// iteration gives the largest eigenvalue of (1/B) sum x'x'^T / 4 + l2 d,
// x' the features as the inner steps see them (scaled, the centered ones
// shifted, the intercept's 1), built densely here.
func TestCurvatureMatchesDenseEigenvalue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const dim, rows, l2 = 6, 40, 0.01
	var b datastore.Records
	dense := make([][dim]float64, rows)
	for i := range rows {
		var keys []uint64
		var vals []float64
		for k := range dim {
			// Keys 0 and 1 are in every row with a large offset; the
			// others are sparse.
			if k < 2 || rng.Float64() < 0.3 {
				v := rng.NormFloat64()
				if k < 2 {
					v += 10 * float64(k+1)
				}
				keys, vals = append(keys, uint64(k)), append(vals, v)
				dense[i][k] = v
			}
		}
		b.Append(1, keys, vals)
	}
	inv := []float64{0.5, 0.2, 1, 1.5, 0.8, 2}
	for _, c := range []struct {
		name      string
		intercept bool
		cent      *lr.Centered
	}{
		{"scaled", false, nil},
		{"intercept", true, nil},
		{"centered", true, &lr.Centered{Keys: []uint64{0, 1}, Inv: []float64{inv[0], inv[1]}, C: []float64{5 * inv[0], 20 * inv[1]}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &step{l2: l2, cent: c.cent}
			n := dim
			if c.intercept {
				n++
			}
			m := make([]float64, n*n)
			for _, row := range dense {
				x := make([]float64, n)
				for k := range dim {
					x[k] = row[k] * inv[k]
				}
				if c.cent != nil {
					for j, k := range c.cent.Keys {
						x[k] -= c.cent.C[j]
					}
				}
				if c.intercept {
					x[dim] = 1
				}
				for p := range n {
					for q := range n {
						m[p*n+q] += x[p] * x[q] / (4 * rows)
					}
				}
			}
			for k := range dim {
				m[k*n+k] += l2 * inv[k] * inv[k]
			}
			want := jacobiMax(m, n)
			got := curvature(s, &b, inv, c.intercept)
			t.Logf("power iteration %.6f, Jacobi %.6f", got, want)
			if math.Abs(got-want) > 1e-3*want {
				t.Fatalf("curvature %.6f, largest eigenvalue %.6f", got, want)
			}
		})
	}
}
