package mfblock

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// memTable is the part of a table step uses (Spec, Get, Add) over a map;
// any other method panics (nil embedded interface).
type memTable struct {
	tasks.Table
	spec kvstore.TableSpec
	rows map[uint64][]float64
	gets int
}

func (m *memTable) Spec() kvstore.TableSpec { return m.spec }

func (m *memTable) Get(keys []uint64, out []float64) error {
	m.gets++
	w := m.spec.Width
	for i, k := range keys {
		copy(out[i*w:(i+1)*w], m.rows[k])
	}
	return nil
}

func (m *memTable) Add(keys []uint64, deltas []float64) error {
	w := m.spec.Width
	for i, k := range keys {
		for c := range w {
			m.rows[k][c] += deltas[i*w+c]
		}
	}
	return nil
}

func newMemTable(name string, size uint64, rank int, rng *rand.Rand) *memTable {
	m := &memTable{spec: kvstore.TableSpec{Name: name, Size: size, Width: rank}, rows: map[uint64][]float64{}}
	for k := range size {
		m.rows[k] = make([]float64, rank)
		for c := range m.rows[k] {
			m.rows[k][c] = rng.Float64() - 0.5
		}
	}
	return m
}

// step trains a batch with repeated users and items as SGD rating by
// rating on the rows would (one Get and one Add per side; equal up to the
// rounding of dot's partial sums and of adding the change back), and eval
// scores the updated model.
func TestStepIsSequentialSGD(t *testing.T) {
	for _, tc := range []struct {
		name               string
		users, items, rank int
		ratings            int
		lr, l2             float64
	}{
		{"rank 1", 5, 7, 1, 40, 0.05, 0.01},
		{"rank 16 few users", 3, 50, 16, 300, 0.01, 0.05},
		{"rank 5 odd", 20, 20, 5, 100, 0.1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.ratings), 3))
			users := newMemTable("users", uint64(tc.users), tc.rank, rng)
			items := newMemTable("items", uint64(tc.items), tc.rank, rng)
			rs := make([]rating, tc.ratings)
			for i := range rs {
				rs[i] = rating{u: uint64(rng.IntN(tc.users)), i: uint64(rng.IntN(tc.items)), r: 1 + 4*rng.Float64()}
			}
			// The model: plain SGD on copies of the rows.
			p, q := map[uint64][]float64{}, map[uint64][]float64{}
			for k, v := range users.rows {
				p[k] = append([]float64(nil), v...)
			}
			for k, v := range items.rows {
				q[k] = append([]float64(nil), v...)
			}
			var wantSq float64
			for _, r := range rs {
				pu, qi := p[r.u], q[r.i]
				var dot float64
				for f := range pu {
					dot += pu[f] * qi[f]
				}
				e := r.r - dot
				wantSq += e * e
				for f := range pu {
					pf, qf := pu[f], qi[f]
					pu[f] += tc.lr * (e*qf - tc.l2*pf)
					qi[f] += tc.lr * (e*pf - tc.l2*qf)
				}
			}
			st := newStepper(users, items, tc.rank)
			n, sq, err := st.step(rs, hyper{lr: tc.lr, l2: tc.l2})
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(rs)) || math.Abs(sq-wantSq) > 1e-12*wantSq {
				t.Fatalf("step: %d ratings, sq %v; want %d, %v", n, sq, len(rs), wantSq)
			}
			if users.gets != 1 || items.gets != 1 {
				t.Fatalf("%d and %d Gets for one batch, want one per side", users.gets, items.gets)
			}
			for _, side := range []struct {
				got  *memTable
				want map[uint64][]float64
			}{{users, p}, {items, q}} {
				for k, row := range side.want {
					for c, v := range row {
						if g := side.got.rows[k][c]; math.Abs(g-v) > 1e-12 {
							t.Fatalf("%s key %d col %d = %v, want %v", side.got.spec.Name, k, c, g, v)
						}
					}
				}
			}
			// eval: the squared error under the model now.
			var evalSq float64
			for _, r := range rs {
				var dot float64
				for f := range p[r.u] {
					dot += p[r.u][f] * q[r.i][f]
				}
				evalSq += (r.r - dot) * (r.r - dot)
			}
			n, sq, err = st.eval(rs)
			if err != nil || n != int64(len(rs)) || math.Abs(sq-evalSq) > 1e-9*evalSq {
				t.Fatalf("eval: %d, %v, %v; want %d, %v", n, sq, err, len(rs), evalSq)
			}
		})
	}
}
