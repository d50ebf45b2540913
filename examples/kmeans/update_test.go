package kmeans

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/testkit"
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

func (m *memTable) Flush() error { return nil }

// memTables makes an update's tables in memory: runs (the centers, then
// the control key) and the first halves of acc and far as given, their
// second halves zero, a fresh ctl.
func memTables(dims int, runs, acc, far []float64) (tables, []*memTable) {
	ms := []*memTable{
		{width: dims, v: runs},
		{width: dims + 2, v: append(acc, make([]float64, len(acc))...)},
		{width: dims + 1, v: append(far, make([]float64, len(far))...)},
		{width: 1, v: make([]float64, ctlKeys)},
	}
	return tables{runs: ms[0], acc: ms[1], far: ms[2], ctl: ms[3]}, ms
}

// TestUpdateMovesEmptyClusterToFarthestPoint: one restart, k = 3, 1-D,
// two workers. Cluster 2 got no point: it moves to the farthest point
// reported (worker 1's, at distance 9), the others to their means; acc
// and far are reset to zero, and the best objective is returned.
func TestUpdateMovesEmptyClusterToFarthestPoint(t *testing.T) {
	cfg := Config{K: 3, Restarts: 1, Tol: 1e-6}
	const dims, workers = 1, 2
	tb, ms := memTables(dims, []float64{0, 1, 100, 0}, // centers, then the control key
		[]float64{
			2, 4, 1, // cluster 0: sum 2 over 4 points, squared distances 1
			9, 3, 10, // cluster 1: sum 9 over 3 points, squared distances 10
			0, 0, 0, // cluster 2: empty
		},
		[]float64{0.5, 1.2, 9, 4}) // worker 0: d 0.5 at 1.2; worker 1: d 9 at 4
	runs, acc, far := ms[0], ms[1], ms[2]
	cs := NewCenters(cfg.K*cfg.Restarts+1, dims, append([]float64(nil), runs.v...))
	u := newUpdater(cfg, dims, workers)
	// Iteration 1 reads the second halves: move them there.
	copy(acc.v[9:], acc.v[:9])
	clear(acc.v[:9])
	copy(far.v[4:], far.v[:4])
	clear(far.v[:4])
	obj, err := u.update(tb, 1, seqKeys(4), cs, false)
	if err != nil {
		t.Fatal(err)
	}
	if obj != 11 {
		t.Errorf("objective %v, want 11", obj)
	}
	if want := []float64{0.5, 3, 4, 0}; !equal(runs.v, want) {
		t.Errorf("centers %v, want %v", runs.v, want)
	}
	// The sums read stay (an update done again reads them); the other
	// halves are cleared for the next iteration.
	if want := []float64{2, 4, 1, 9, 3, 10, 0, 0, 0}; !equal(acc.v[9:], want) {
		t.Errorf("acc's read half %v, want %v", acc.v[9:], want)
	}
	if want := []float64{1, 0, 0}; !equal(ms[3].v, want) {
		t.Errorf("ctl %v, want %v (iteration 1 done, best restart 0, no model yet)", ms[3].v, want)
	}
}

// TestUpdateClearsTheNextHalf: the update of iteration it clears the
// half of acc and far that iteration it+1 sums into (it held the sums of
// iteration it-1).
func TestUpdateClearsTheNextHalf(t *testing.T) {
	cfg := Config{K: 1, Restarts: 1}
	tb, ms := memTables(1, []float64{0, 0}, []float64{6, 3, 2}, []float64{1, 5})
	ms[1].v[3], ms[1].v[4], ms[1].v[5] = 7, 7, 7 // left over from iteration 1
	ms[2].v[2], ms[2].v[3] = 7, 7
	if _, err := newUpdater(cfg, 1, 1).update(tb, 2, seqKeys(2), NewCenters(2, 1, make([]float64, 2)), false); err != nil {
		t.Fatal(err)
	}
	if !equal(ms[0].v, []float64{2, 0}) || !equal(ms[1].v, []float64{6, 3, 2, 0, 0, 0}) || !equal(ms[2].v, []float64{1, 5, 0, 0}) {
		t.Fatalf("runs %v, acc %v, far %v", ms[0].v, ms[1].v, ms[2].v)
	}
}

// dying is an update's tables ms on a slave that dies after *left keys
// added.
func dying(ms []*memTable, left *int) tables {
	d := func(m *memTable) testkit.Dying { return testkit.Dying{T: m, Width: m.width, Left: left} }
	return tables{runs: d(ms[0]), acc: d(ms[1]), far: d(ms[2]), ctl: d(ms[3])}
}

// TestUpdateDoneAgainEndsAsOne: an update whose worker dies after any
// number of its writes (whole or part of a call), done again by a fresh
// updater from what the tables then hold (as a survivor does), leaves
// every table as one undisturbed update does; a death before the mark
// leaves the iteration unmarked, so the survivors know.
func TestUpdateDoneAgainEndsAsOne(t *testing.T) {
	cfg := Config{K: 3, Restarts: 2, Tol: 1e-6}
	const dims, workers, it = 2, 2, 5
	start := func() (tables, []*memTable) {
		tb, ms := memTables(dims,
			[]float64{0, 0, 1, 1, 5, 5, 0, 1, 1, 0, 9, 9, 0, 0}, // 2 restarts x 3 centers, the control key
			[]float64{ // iteration 5's sums (half 1 after the move below)
				2, 2, 4, 1, 3, 1, 3, 2, 0, 0, 0, 0,
				1, 3, 2, 4, 5, 5, 5, 8, 0, 0, 0, 0,
			},
			[]float64{0.5, 1, 1, 7, 6, 6, 2, 3, 3, 0.1, 0, 1}) // restart 0: workers 0, 1; restart 1: workers 0, 1
		acc, far := ms[1], ms[2]
		copy(acc.v[24:], acc.v[:24])
		for i := range 24 {
			acc.v[i] = 9 // iteration 4's sums, still there
		}
		copy(far.v[12:], far.v[:12])
		for i := range 12 {
			far.v[i] = 9
		}
		ms[3].v[ctlDone] = it - 1
		return tb, ms
	}
	tb, want := start()
	cs := NewCenters(cfg.K*cfg.Restarts+1, dims, append([]float64(nil), want[0].v...))
	if _, err := newUpdater(cfg, dims, workers).update(tb, it, seqKeys(7), cs, false); err != nil {
		t.Fatal(err)
	}
	total := 0 // keys an undisturbed update adds
	{
		left := 1 << 30
		tb, ms := start()
		dt := dying(ms, &left)
		cs := NewCenters(cfg.K*cfg.Restarts+1, dims, append([]float64(nil), ms[0].v...))
		if _, err := newUpdater(cfg, dims, workers).update(dt, it, seqKeys(7), cs, false); err != nil {
			t.Fatal(err)
		}
		total = 1<<30 - left
		_ = tb
	}
	for died := 0; died < total; died++ {
		left := died
		tb, ms := start()
		dt := dying(ms, &left)
		cs := NewCenters(cfg.K*cfg.Restarts+1, dims, append([]float64(nil), ms[0].v...))
		if _, err := newUpdater(cfg, dims, workers).update(dt, it, seqKeys(7), cs, false); !errors.Is(err, testkit.ErrDied) {
			t.Fatalf("died after %d of %d keys: %v", died, total, err)
		}
		if int(ms[3].v[ctlDone]) == it {
			t.Fatalf("died after %d of %d keys: the iteration is marked done", died, total)
		}
		// A survivor reads the tables and does it again.
		cs = NewCenters(cfg.K*cfg.Restarts+1, dims, append([]float64(nil), ms[0].v...))
		if _, err := newUpdater(cfg, dims, workers).update(tb, it, seqKeys(7), cs, false); err != nil {
			t.Fatal(err)
		}
		for i, name := range []string{"runs", "acc", "far", "ctl"} {
			if !equal(ms[i].v, want[i].v) {
				t.Fatalf("died after %d of %d keys, done again: %s %v, want %v", died, total, name, ms[i].v, want[i].v)
			}
		}
	}
	t.Logf("%d deaths tried", total)
}

// TestUpdateSignalsConvergence: the control key is set once no restart's
// objective improved by tol, and never with tol = 0.
func TestUpdateSignalsConvergence(t *testing.T) {
	for _, c := range []struct {
		tol  float64
		stop bool
	}{{1e-6, true}, {0, false}} {
		cfg := Config{K: 1, Restarts: 2, Tol: c.tol}
		tb, ms := memTables(1, make([]float64, 3), make([]float64, 6), make([]float64, 8))
		runs, acc := ms[0], ms[1]
		u := newUpdater(cfg, 1, 2)
		for it := range 2 { // the same sums twice: no improvement
			copy(acc.v[it%2*6:], []float64{2, 2, 5, 3, 3, 7})
			cs := NewCenters(3, 1, append([]float64(nil), runs.v...))
			obj, err := u.update(tb, it, seqKeys(3), cs, false)
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
	tb, _ := memTables(1, make([]float64, 2), []float64{math.Inf(1), 1, 0}, make([]float64, 2))
	cs := NewCenters(2, 1, make([]float64, 2))
	_, err := newUpdater(cfg, 1, 1).update(tb, 0, seqKeys(2), cs, false)
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
