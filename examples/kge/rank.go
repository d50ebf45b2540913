package kge

import (
	"fmt"
	"math"

	"github.com/flexps/flexps/datastore"
)

// Triple is a fact (head, relation, tail) by integer ids.
type Triple struct{ H, R, T uint64 }

// TripleAt reads record i of a "ratings"-format input as a triple: the
// line "head relation tail" parses as user = head, item = relation and
// rating = tail, so the tail must be a non-negative integer.
func TripleAt(r *datastore.Records, i int) (Triple, error) {
	a, b := r.Offsets[i], r.Offsets[i+1]
	if b-a != 2 {
		return Triple{}, fmt.Errorf("%s: record has %d ids, want \"head relation tail\" (format = \"ratings\")", r.Where(i), b-a)
	}
	t := r.Labels[i]
	if t < 0 || t != math.Trunc(t) || t >= 1<<53 {
		return Triple{}, fmt.Errorf("%s: tail %v is not a non-negative integer id (want \"head relation tail\")", r.Where(i), t)
	}
	return Triple{H: r.Keys[a], R: r.Keys[a+1], T: uint64(t)}, nil
}

// Known is the set of true triples filtered out of the ranking.
type Known map[Triple]struct{}

// AddRecords adds every triple of r.
func (k Known) AddRecords(r *datastore.Records) error {
	for i := 0; i < r.Len(); i++ {
		t, err := TripleAt(r, i)
		if err != nil {
			return err
		}
		k[t] = struct{}{}
	}
	return nil
}

// Embeddings are dense ComplEx embeddings: row i of Ent (Rel) holds the
// real parts of entity (relation) i, then the imaginary parts.
type Embeddings struct {
	Dim      int
	Ent, Rel []float64
}

// NumEnt is the number of entities.
func (e *Embeddings) NumEnt() int { return len(e.Ent) / (2 * e.Dim) }

func (e *Embeddings) row(x []float64, i uint64) []float64 {
	w := 2 * e.Dim
	return x[int(i)*w : int(i+1)*w]
}

// score is Re(<h, r, conj(t)>) for rows laid out [re..., im...].
func score(h, r, t []float64, dim int) float64 {
	s := 0.0
	for k := 0; k < dim; k++ {
		hr, hi, rr, ri, tr, ti := h[k], h[dim+k], r[k], r[dim+k], t[k], t[dim+k]
		s += hr*rr*tr + hi*rr*ti + hr*ri*ti - hi*ri*tr
	}
	return s
}

// RankStats sums filtered ranking results; every test triple counts twice
// (its tail ranked given head and relation, its head given relation and
// tail).
type RankStats struct {
	N                    int64
	RRSum                float64
	Hits1, Hits3, Hits10 int64
}

// Add accumulates o.
func (s *RankStats) Add(o RankStats) {
	s.N += o.N
	s.RRSum += o.RRSum
	s.Hits1 += o.Hits1
	s.Hits3 += o.Hits3
	s.Hits10 += o.Hits10
}

func (s *RankStats) addRank(rank float64) {
	s.N++
	s.RRSum += 1 / rank
	for _, h := range []struct {
		k int64
		n *int64
	}{{1, &s.Hits1}, {3, &s.Hits3}, {10, &s.Hits10}} {
		if rank <= float64(h.k) {
			*h.n++
		}
	}
}

// Metrics are MRR and Hits@k as fractions.
func (s RankStats) Metrics() map[string]float64 {
	n := float64(max(s.N, 1))
	return map[string]float64{"mrr": s.RRSum / n, "hits1": float64(s.Hits1) / n, "hits3": float64(s.Hits3) / n, "hits10": float64(s.Hits10) / n}
}

// FilteredRank ranks the true tail of x against every entity (and the true
// head, with head=true), skipping candidates that form another known
// triple. Ties count half (the mean of the optimistic and pessimistic
// rank), so a constant model ranks like random guessing, not perfectly.
func (e *Embeddings) FilteredRank(x Triple, head bool, known Known) (float64, error) {
	n := uint64(e.NumEnt())
	if x.H >= n || x.T >= n || x.R >= uint64(len(e.Rel)/(2*e.Dim)) {
		return 0, fmt.Errorf("triple (%d %d %d) is beyond the model's %d entities and %d relations", x.H, x.R, x.T, n, len(e.Rel)/(2*e.Dim))
	}
	r := e.row(e.Rel, x.R)
	h, t := e.row(e.Ent, x.H), e.row(e.Ent, x.T)
	truth := score(h, r, t, e.Dim)
	var greater, equal float64
	for c := uint64(0); c < n; c++ {
		cand := x
		var s float64
		if head {
			if c == x.H {
				continue
			}
			cand.H = c
			s = score(e.row(e.Ent, c), r, t, e.Dim)
		} else {
			if c == x.T {
				continue
			}
			cand.T = c
			s = score(h, r, e.row(e.Ent, c), e.Dim)
		}
		if s < truth {
			continue
		}
		if _, ok := known[cand]; ok {
			continue
		}
		if s > truth {
			greater++
		} else {
			equal++
		}
	}
	return 1 + greater + equal/2, nil
}

// RankAll ranks the head and the tail of every triple of r.
func (e *Embeddings) RankAll(r *datastore.Records, lo, hi int, known Known) (RankStats, error) {
	var st RankStats
	for i := lo; i < hi; i++ {
		x, err := TripleAt(r, i)
		if err != nil {
			return st, err
		}
		for _, head := range []bool{false, true} {
			rank, err := e.FilteredRank(x, head, known)
			if err != nil {
				return st, fmt.Errorf("%s: %w", r.Where(i), err)
			}
			st.addRank(rank)
		}
	}
	return st, nil
}
