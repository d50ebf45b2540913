package kmeans

import (
	"math"
	"strings"
	"testing"
)

// memTable is a dense in-memory table: Get copies, Add adds.
type memTable struct {
	width int
	v     []float64
}

func (m *memTable) Get(keys []uint64, out []float64) error {
	for i, k := range keys {
		copy(out[i*m.width:(i+1)*m.width], m.v[int(k)*m.width:])
	}
	return nil
}

func (m *memTable) Add(keys []uint64, d []float64) error {
	for i, k := range keys {
		for f := range m.width {
			m.v[int(k)*m.width+f] += d[i*m.width+f]
		}
	}
	return nil
}

// TestUpdateMovesEmptyClusterToFarthestPoint: one restart, k = 3, 1-D,
// two workers. Cluster 2 got no point: it moves to the farthest point
// reported (worker 1's, at distance 9), the others to their means; acc
// and far are reset to zero, and the best objective is returned.
func TestUpdateMovesEmptyClusterToFarthestPoint(t *testing.T) {
	cfg := Config{K: 3, Restarts: 1, Tol: 1e-6}
	const dims, workers = 1, 2
	runs := &memTable{width: dims, v: []float64{0, 1, 100, 0}} // centers, then the control key
	acc := &memTable{width: dims + 2, v: []float64{
		2, 4, 1, // cluster 0: sum 2 over 4 points, squared distances 1
		9, 3, 10, // cluster 1: sum 9 over 3 points, squared distances 10
		0, 0, 0, // cluster 2: empty
	}}
	far := &memTable{width: dims + 1, v: []float64{0.5, 1.2, 9, 4}} // worker 0: d 0.5 at 1.2; worker 1: d 9 at 4
	cs := NewCenters(cfg.K*cfg.Restarts+1, dims, append([]float64(nil), runs.v...))
	u := newUpdater(cfg, dims, workers)
	obj, err := u.update(runs, acc, far, seqKeys(4), cs, false)
	if err != nil {
		t.Fatal(err)
	}
	if obj != 11 {
		t.Errorf("objective %v, want 11", obj)
	}
	if want := []float64{0.5, 3, 4, 0}; !equal(runs.v, want) {
		t.Errorf("centers %v, want %v", runs.v, want)
	}
	for _, tab := range []*memTable{acc, far} {
		for _, v := range tab.v {
			if v != 0 {
				t.Fatalf("not reset: %v", tab.v)
			}
		}
	}
}

// TestUpdateSignalsConvergence: the control key is set once no restart's
// objective improved by tol, and never with tol = 0.
func TestUpdateSignalsConvergence(t *testing.T) {
	for _, c := range []struct {
		tol  float64
		stop bool
	}{{1e-6, true}, {0, false}} {
		cfg := Config{K: 1, Restarts: 2, Tol: c.tol}
		runs := &memTable{width: 1, v: make([]float64, 3)}
		acc := &memTable{width: 3, v: make([]float64, 6)}
		far := &memTable{width: 2, v: make([]float64, 8)}
		u := newUpdater(cfg, 1, 2)
		for range 2 { // the same sums twice: no improvement
			copy(acc.v, []float64{2, 2, 5, 3, 3, 7})
			cs := NewCenters(3, 1, append([]float64(nil), runs.v...))
			obj, err := u.update(runs, acc, far, seqKeys(3), cs, false)
			if err != nil {
				t.Fatal(err)
			}
			if obj != 5 || u.best != 0 {
				t.Fatalf("objective %v of restart %d, want 5 of restart 0", obj, u.best)
			}
		}
		if stop := runs.v[2] != 0; stop != c.stop {
			t.Errorf("tol %v: stop signal %v, want %v", c.tol, stop, c.stop)
		}
	}
}

func TestUpdateRefusesNonFiniteCenters(t *testing.T) {
	cfg := Config{K: 1, Restarts: 1}
	runs := &memTable{width: 1, v: make([]float64, 2)}
	acc := &memTable{width: 3, v: []float64{math.Inf(1), 1, 0}}
	far := &memTable{width: 2, v: make([]float64, 2)}
	cs := NewCenters(2, 1, make([]float64, 2))
	_, err := newUpdater(cfg, 1, 1).update(runs, acc, far, seqKeys(2), cs, false)
	if err == nil || !strings.Contains(err.Error(), "center 0 of restart 0") {
		t.Fatalf("error %v, want one naming the center", err)
	}
}

func TestNorm2RefusesNonFiniteValues(t *testing.T) {
	cs := NewCenters(1, 2, make([]float64, 2))
	if _, err := cs.Norm2([]uint64{0, 1}, []float64{1, math.NaN()}, true); err == nil || !strings.Contains(err.Error(), "not finite") {
		t.Fatalf("error %v, want a non-finite value error", err)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-12 {
			return false
		}
	}
	return true
}
