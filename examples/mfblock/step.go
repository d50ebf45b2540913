package mfblock

import (
	"fmt"

	"github.com/flexps/flexps/tasks"
)

type hyper struct{ lr, l2 float64 }

// side is one side of the matrix in a batch: its distinct ids, their
// rows as read and the working copy SGD updates.
type side struct {
	t     tasks.Table
	index *tasks.KeyIndex
	keys  []uint64
	f, f0 []float64
	rank  int
}

func newSide(t tasks.Table, rank int) *side {
	return &side{t: t, index: tasks.NewKeyIndex(t.Spec().Size), rank: rank}
}

// gather reads the rows of ids (one Get).
func (s *side) gather(ids func(i int) uint64, n int) error {
	s.index.Reset()
	s.keys = s.keys[:0]
	for i := range n {
		k := ids(i)
		if _, ok := s.index.Get(k); !ok {
			s.index.Put(k, int32(len(s.keys)))
			s.keys = append(s.keys, k)
		}
	}
	s.f = grow(s.f, len(s.keys)*s.rank)
	if err := s.t.Get(s.keys, s.f); err != nil {
		return err
	}
	s.f0 = append(s.f0[:0], s.f...)
	return nil
}

func (s *side) row(k uint64) []float64 {
	j, _ := s.index.Get(k)
	return s.f[int(j)*s.rank : int(j+1)*s.rank]
}

// push adds the change back (one Add).
func (s *side) push() error {
	for i := range s.f {
		s.f0[i] = s.f[i] - s.f0[i]
	}
	return s.t.Add(s.keys, s.f0)
}

// stepper trains mini-batches of ratings.
type stepper struct {
	users, items *side
	rank         int
}

func newStepper(users, items tasks.Table, rank int) *stepper {
	return &stepper{users: newSide(users, rank), items: newSide(items, rank), rank: rank}
}

func (st *stepper) gather(rs []rating) error {
	if err := st.users.gather(func(i int) uint64 { return rs[i].u }, len(rs)); err != nil {
		return fmt.Errorf("%s: %w", Func, err)
	}
	if err := st.items.gather(func(i int) uint64 { return rs[i].i }, len(rs)); err != nil {
		return fmt.Errorf("%s: %w", Func, err)
	}
	return nil
}

// step runs SGD over rs in order on a local copy of their rows, then adds
// the change back; it returns the count and squared error of the ratings
// as predicted just before their update.
func (st *stepper) step(rs []rating, h hyper) (int64, float64, error) {
	if err := st.gather(rs); err != nil {
		return 0, 0, err
	}
	var sq float64
	for _, r := range rs {
		p, q := st.users.row(r.u), st.items.row(r.i)
		var dot float64
		for f := range p {
			dot += p[f] * q[f]
		}
		e := r.r - dot
		sq += e * e
		for f := range p {
			pf, qf := p[f], q[f]
			p[f] += h.lr * (e*qf - h.l2*pf)
			q[f] += h.lr * (e*pf - h.l2*qf)
		}
	}
	if err := st.users.push(); err != nil {
		return 0, 0, err
	}
	if err := st.items.push(); err != nil {
		return 0, 0, err
	}
	return int64(len(rs)), sq, nil
}

// eval is the squared error of rs under the current model.
func (st *stepper) eval(rs []rating) (int64, float64, error) {
	for _, r := range rs {
		if r.u >= st.users.t.Spec().Size || r.i >= st.items.t.Spec().Size {
			return 0, 0, fmt.Errorf("rating (%d, %d) is beyond the tables' sizes", r.u, r.i)
		}
	}
	if err := st.gather(rs); err != nil {
		return 0, 0, err
	}
	var sq float64
	for _, r := range rs {
		p, q := st.users.row(r.u), st.items.row(r.i)
		var dot float64
		for f := range p {
			dot += p[f] * q[f]
		}
		e := r.r - dot
		sq += e * e
	}
	return int64(len(rs)), sq, nil
}

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}
