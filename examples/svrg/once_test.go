package svrg

import (
	"errors"
	"math"
	"testing"

	"github.com/flexps/flexps/internal/testkit"
)

// memTable is a width-1 table in memory.
type memTable []float64

func (m memTable) Get(keys []uint64, out []float64) error {
	for i, k := range keys {
		out[i] = m[k]
	}
	return nil
}

func (m memTable) Add(keys []uint64, d []float64) error {
	for i, k := range keys {
		m[k] += d[i]
	}
	return nil
}

// TestOneWorkerStepsDoneAgainEndAsOne: svrg.full's reset and mean, cut
// by a death after any number of their writes (whole calls or part of
// one) and done again by another worker from what the tables then hold
// (as once does), leave every table as one undisturbed step does. Before,
// the mean added sum*(1/n - 1) + l2 w~ to mu, which held the sum: a death
// half-way left part of mu the sum, and doing it again would have made
// the rest the mean of a mean.
func TestOneWorkerStepsDoneAgainEndAsOne(t *testing.T) {
	const dim, n, l2 = 5, 4.0, 0.1
	// The tables before the step: w, snap, sum, mu, n, the intercept b
	// and its state (snap_b, mu_b, marker, sum_b).
	start := func() []memTable {
		return []memTable{
			{0.5, -1, 2, 0, 3}, {9, 9, 9, 9, 9}, {1, 2, -3, 0.25, 7}, {4, 4, 4, 4, 4}, {7}, {1.5}, {2, 3, 1, -6},
		}
	}
	state := func(ts []getAdder) *fullState {
		return &fullState{w: ts[0], snap: ts[1], sum: ts[2], mu: ts[3], n: ts[4], b: ts[5], bstate: ts[6],
			keys: allKeys(dim), wv: make([]float64, dim), buf: make([]float64, dim), one: make([]float64, 1), bs: make([]float64, biasStateSize)}
	}
	for _, step := range []struct {
		name string
		do   func(f *fullState) error
	}{
		{"reset", (*fullState).reset},
		{"mean", func(f *fullState) error {
			if err := f.w.Get(f.keys, f.wv); err != nil {
				return err
			}
			return f.mean(n, l2)
		}},
	} {
		t.Run(step.name, func(t *testing.T) {
			want := start()
			var plain []getAdder
			for _, m := range want {
				plain = append(plain, m)
			}
			if err := step.do(state(plain)); err != nil {
				t.Fatal(err)
			}
			total := 0
			for died := 0; ; died++ {
				left := died
				got := start()
				var dying []getAdder
				for _, m := range got {
					dying = append(dying, testkit.Dying{T: m, Width: 1, Left: &left})
				}
				err := step.do(state(dying))
				if err == nil {
					total = died
					break
				}
				if !errors.Is(err, testkit.ErrDied) {
					t.Fatal(err)
				}
				var again []getAdder
				for _, m := range got {
					again = append(again, m)
				}
				if err := step.do(state(again)); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					for k := range got[i] {
						if math.Abs(got[i][k]-want[i][k]) > 1e-12 {
							t.Fatalf("died after %d keys, done again: table %d is %v, want %v", died, i, got[i], want[i])
						}
					}
				}
			}
			if total < 5 {
				t.Fatalf("the step wrote %d keys", total)
			}
			t.Logf("%d deaths tried", total)
		})
	}
	// What one step leaves: the reset, snap = w, sum and n zero, the
	// intercept's state (b, mu_b kept, 1, 0); the mean, mu = sum/n + l2 w.
	ts := start()
	f := state([]getAdder{ts[0], ts[1], ts[2], ts[3], ts[4], ts[5], ts[6]})
	if err := f.reset(); err != nil {
		t.Fatal(err)
	}
	if ts[1][2] != 2 || ts[2][4] != 0 || ts[4][0] != 0 || ts[6][0] != 1.5 || ts[6][1] != 3 || ts[6][2] != 1 || ts[6][3] != 0 {
		t.Fatalf("after the reset: snap %v, sum %v, n %v, bias state %v", ts[1], ts[2], ts[4], ts[6])
	}
	ts = start()
	f = state([]getAdder{ts[0], ts[1], ts[2], ts[3], ts[4], ts[5], ts[6]})
	copy(f.wv, ts[0])
	if err := f.mean(n, l2); err != nil {
		t.Fatal(err)
	}
	if ts[3][2] != -3/n+l2*2 || ts[6][1] != -6/n {
		t.Fatalf("after the mean: mu %v, bias state %v", ts[3], ts[6])
	}
}
