package mf

import (
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// Hyper are one epoch's SGD hyper-parameters.
type Hyper struct {
	LR, L2, L2Bias float64
}

// side is one side of the matrix (users or items) in a batch: its
// distinct ids, their factor rows and biases as read, and the working
// copies SGD updates.
type side struct {
	name   string
	col    int // the id's position in a ratings record: 0 user, 1 item
	t      tasks.Table
	bias   tasks.Table // nil: no per-id bias
	size   uint64
	rank   int
	index  *tasks.KeyIndex
	keys   []uint64
	f, f0  []float64 // rank values per key
	b, b0  []float64 // one per key, when bias != nil
	deltas []float64
}

func newSide(name string, col int, t, bias tasks.Table, rank int) *side {
	size := t.Spec().Size
	return &side{name: name, col: col, t: t, bias: bias, size: size, rank: rank, index: tasks.NewKeyIndex(size)}
}

// gather collects the distinct ids of records lo..hi and reads their rows.
func (s *side) gather(r *datastore.Records, lo, hi int) error {
	s.index.Reset()
	s.keys = s.keys[:0]
	for i := lo; i < hi; i++ {
		a := r.Offsets[i]
		if r.Offsets[i+1]-a != 2 {
			return fmt.Errorf("record has %d ids, want user and item (format = \"ratings\")", r.Offsets[i+1]-a)
		}
		k := r.Keys[a+s.col]
		if k >= s.size {
			return fmt.Errorf("%s id %d is beyond table %q's size %d", s.name, k, s.t.Spec().Name, s.size)
		}
		if _, ok := s.index.Get(k); !ok {
			s.index.Put(k, int32(len(s.keys)))
			s.keys = append(s.keys, k)
		}
	}
	s.f = grow(s.f, len(s.keys)*s.rank)
	if err := s.t.Get(s.keys, s.f); err != nil {
		return err
	}
	if s.bias != nil {
		s.b = grow(s.b, len(s.keys))
		if err := s.bias.Get(s.keys, s.b); err != nil {
			return err
		}
	}
	return nil
}

// snapshot keeps the values as read, to add back only the change.
func (s *side) snapshot() {
	s.f0 = append(s.f0[:0], s.f...)
	s.b0 = append(s.b0[:0], s.b...)
}

// push adds the batch's change to the tables.
func (s *side) push() error {
	s.deltas = grow(s.deltas, len(s.f))
	for i := range s.f {
		s.deltas[i] = s.f[i] - s.f0[i]
	}
	if err := s.t.Add(s.keys, s.deltas); err != nil {
		return err
	}
	if s.bias == nil {
		return nil
	}
	s.deltas = s.deltas[:len(s.b)]
	for i := range s.b {
		s.deltas[i] = s.b[i] - s.b0[i]
	}
	return s.bias.Add(s.keys, s.deltas)
}

// MiniBatch holds a worker's reusable buffers for both sides of the
// matrix and the global bias.
type MiniBatch struct {
	rank      int
	users     *side
	items     *side
	bias      tasks.Table // nil: no global bias
	mu, mu0   float64
	biasKey   [1]uint64
	biasVal   [1]float64
	BiasShare float64 // fraction of the global bias change this worker adds (1/workers)
}

// NewMiniBatch prepares buffers for the tables.
func NewMiniBatch(t Tables, rank int) *MiniBatch {
	return &MiniBatch{rank: rank, users: newSide("user", 0, t.Users, t.UserBias, rank), items: newSide("item", 1, t.Items, t.ItemBias, rank),
		bias: t.Bias, BiasShare: 1}
}

func (m *MiniBatch) gather(r *datastore.Records, lo, hi int) error {
	if err := m.users.gather(r, lo, hi); err != nil {
		return err
	}
	if err := m.items.gather(r, lo, hi); err != nil {
		return err
	}
	m.mu = 0
	if m.bias != nil {
		if err := m.bias.Get(m.biasKey[:], m.biasVal[:]); err != nil {
			return err
		}
		m.mu = m.biasVal[0]
	}
	return nil
}

// predict returns the prediction for record i and the positions of its
// user and item in the batch.
func (m *MiniBatch) predict(r *datastore.Records, i int) (float64, int, int) {
	a := r.Offsets[i]
	pu, _ := m.users.index.Get(r.Keys[a])
	pi, _ := m.items.index.Get(r.Keys[a+1])
	u, v := int(pu), int(pi)
	p := m.mu
	if m.users.bias != nil {
		p += m.users.b[u]
	}
	if m.items.bias != nil {
		p += m.items.b[v]
	}
	fu, fv := m.users.f[u*m.rank:(u+1)*m.rank], m.items.f[v*m.rank:(v+1)*m.rank]
	for k, x := range fu {
		p += x * fv[k]
	}
	return p, u, v
}

// Step trains on records lo..hi: one Get and one Add per table. The error
// of each rating is measured just before its update (progressive
// validation).
func (m *MiniBatch) Step(r *datastore.Records, lo, hi int, h Hyper) (Stats, error) {
	if err := m.gather(r, lo, hi); err != nil {
		return Stats{}, err
	}
	m.users.snapshot()
	m.items.snapshot()
	m.mu0 = m.mu
	var st Stats
	lr, l2, l2b := h.LR, h.L2, h.L2Bias
	for i := lo; i < hi; i++ {
		p, u, v := m.predict(r, i)
		e := r.Labels[i] - p
		st.N++
		st.SqErr += e * e
		if m.bias != nil {
			m.mu += lr * e
		}
		if m.users.bias != nil {
			m.users.b[u] += lr * (e - l2b*m.users.b[u])
		}
		if m.items.bias != nil {
			m.items.b[v] += lr * (e - l2b*m.items.b[v])
		}
		fu, fv := m.users.f[u*m.rank:(u+1)*m.rank], m.items.f[v*m.rank:(v+1)*m.rank]
		for k := range fu {
			x, y := fu[k], fv[k]
			fu[k] += lr * (e*y - l2*x)
			fv[k] += lr * (e*x - l2*y)
		}
	}
	if err := m.users.push(); err != nil {
		return st, err
	}
	if err := m.items.push(); err != nil {
		return st, err
	}
	if m.bias != nil {
		m.biasVal[0] = (m.mu - m.mu0) * m.BiasShare
		if err := m.bias.Add(m.biasKey[:], m.biasVal[:]); err != nil {
			return st, err
		}
	}
	return st, nil
}

// Eval scores records lo..hi without updating.
func (m *MiniBatch) Eval(r *datastore.Records, lo, hi int) (Stats, error) {
	if err := m.gather(r, lo, hi); err != nil {
		return Stats{}, err
	}
	var st Stats
	for i := lo; i < hi; i++ {
		p, _, _ := m.predict(r, i)
		e := r.Labels[i] - p
		st.N++
		st.SqErr += e * e
	}
	return st, nil
}

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}
