package mfblock

import (
	"fmt"

	"github.com/flexps/flexps/tasks"
)

type hyper struct{ lr, l2 float64 }

// side is one side of the matrix in a batch: its distinct ids, their
// rows as read, the working copy SGD updates, and for each rating of the
// batch the index of its row (so the update loop does no lookups).
type side struct {
	t     tasks.Table
	index *tasks.KeyIndex
	keys  []uint64
	at    []int32
	f, f0 []float64
	rank  int
	items bool // the side of r.i (else r.u)
}

func newSide(t tasks.Table, rank int, items bool) *side {
	return &side{t: t, index: tasks.NewKeyIndex(t.Spec().Size), rank: rank, items: items}
}

// gather reads the rows of the batch's distinct ids (one Get).
func (s *side) gather(rs []rating) error {
	s.index.Reset()
	s.keys, s.at = s.keys[:0], s.at[:0]
	var last uint64
	var lastJ int32 = -1
	for _, r := range rs {
		k := r.u
		if s.items {
			k = r.i
		}
		// Ratings grouped by user repeat the previous rating's user.
		if lastJ >= 0 && k == last {
			s.at = append(s.at, lastJ)
			continue
		}
		j, ok := s.index.Get(k)
		if !ok {
			j = int32(len(s.keys))
			s.index.Put(k, j)
			s.keys = append(s.keys, k)
		}
		s.at = append(s.at, j)
		last, lastJ = k, j
	}
	s.f = grow(s.f, len(s.keys)*s.rank)
	if err := s.t.Get(s.keys, s.f); err != nil {
		return err
	}
	s.f0 = append(s.f0[:0], s.f...)
	return nil
}

// row is the working row of the batch's n-th rating.
func (s *side) row(n int) []float64 {
	return s.f[int(s.at[n])*s.rank:][:s.rank]
}

// push adds the change back (one Add).
func (s *side) push() error {
	f0 := s.f0[:len(s.f)]
	for i, v := range s.f {
		f0[i] = v - f0[i]
	}
	return s.t.Add(s.keys, s.f0)
}

// stepper trains mini-batches of ratings.
type stepper struct {
	users, items *side
	rank         int
	mu           float64 // the global mean the factors model the residuals of
}

func newStepper(users, items tasks.Table, rank int) *stepper {
	return &stepper{users: newSide(users, rank, false), items: newSide(items, rank, true), rank: rank}
}

func (st *stepper) gather(rs []rating) error {
	if err := st.users.gather(rs); err != nil {
		return fmt.Errorf("%s: %w", Func, err)
	}
	if err := st.items.gather(rs); err != nil {
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
	for n, r := range rs {
		p, q := st.users.row(n), st.items.row(n)
		q = q[:len(p)] // one length: no bounds checks in the loop
		e := r.r - st.mu - dot(p, q)
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
	for n, r := range rs {
		e := r.r - st.mu - dot(st.users.row(n), st.items.row(n))
		sq += e * e
	}
	return int64(len(rs)), sq, nil
}

// dot is p . q summed in four interleaved partial sums, so the additions
// pipeline instead of forming one chain of len(p) dependent adds (the
// latency of that chain was most of a rank-16 update).
func dot(p, q []float64) float64 {
	q = q[:len(p)]
	var s0, s1, s2, s3 float64
	f := 0
	for ; f+4 <= len(p); f += 4 {
		s0 += p[f] * q[f]
		s1 += p[f+1] * q[f+1]
		s2 += p[f+2] * q[f+2]
		s3 += p[f+3] * q[f+3]
	}
	for ; f < len(p); f++ {
		s0 += p[f] * q[f]
	}
	return (s0 + s1) + (s2 + s3)
}

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}
