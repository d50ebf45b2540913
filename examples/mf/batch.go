package mf

import (
	"fmt"
	"math"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// Hyper are one epoch's SGD hyper-parameters.
type Hyper struct {
	LR, L2, L2Bias float64
}

// side is one side of the matrix (users or items) in a batch: its
// distinct ids, their factor rows, biases and rating counts as read, and
// the working copies SGD updates.
type side struct {
	col     int // the id's position in a ratings record: 0 user, 1 item
	t       tasks.Table
	bias    tasks.Table // nil: no per-id bias
	count   tasks.Table
	rank    int
	index   *tasks.KeyIndex
	keys    []uint64
	f, f0   []float64 // rank values per key
	b, b0   []float64 // one per key, when bias != nil
	inv     []float64 // 1 / ratings of the key (from count): its share of the row's L2
	cnt     []float64 // count table rows
	counts  []float64 // every key's rating count, when loaded (loadCounts)
	deltas  []float64
	bdeltas []float64
	// fixedBias: the biases are read, not trained (Tables.FixedBiases).
	fixedBias bool
}

func newSide(col int, t, bias, count tasks.Table, rank int) *side {
	return &side{col: col, t: t, bias: bias, count: count, rank: rank, index: tasks.NewKeyIndex(t.Spec().Size)}
}

// collect records the distinct ids of records lo..hi (already checked).
func (s *side) collect(r *datastore.Records, lo, hi int) {
	s.index.Reset()
	s.keys = s.keys[:0]
	for i := lo; i < hi; i++ {
		k := r.Keys[r.Offsets[i]+s.col]
		if _, ok := s.index.Get(k); !ok {
			s.index.Put(k, int32(len(s.keys)))
			s.keys = append(s.keys, k)
		}
	}
}

// read fetches the batch's rows (and with counts, the L2 shares).
func (s *side) read(counts bool) error {
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
	if !counts {
		return nil
	}
	return s.readInv()
}

// readInv sets the L2 shares 1/n of the batch's keys from their rating
// counts.
func (s *side) readInv() error {
	s.inv = grow(s.inv, len(s.keys))
	if s.counts != nil {
		for i, k := range s.keys {
			s.inv[i] = 1 / max(s.counts[k], 1)
		}
		return nil
	}
	s.cnt = grow(s.cnt, countWidth*len(s.keys))
	if err := s.count.Get(s.keys, s.cnt); err != nil {
		return err
	}
	for i := range s.inv {
		s.inv[i] = 1 / max(s.cnt[countWidth*i], 1)
	}
	return nil
}

// snapshot keeps the values as read, to add back only the change.
func (s *side) snapshot() {
	s.f0 = append(s.f0[:0], s.f...)
	s.b0 = append(s.b0[:0], s.b...)
}

// diff computes the batch's change and checks it is finite: a diverged
// update must never reach the model, and both sides are checked before
// either is added.
func (s *side) diff() error {
	var err error
	if s.deltas, err = finiteDiff(s.deltas, s.f, s.f0, s.t); err != nil {
		return err
	}
	if s.bias == nil || s.fixedBias {
		return nil
	}
	s.bdeltas, err = finiteDiff(s.bdeltas, s.b, s.b0, s.bias)
	return err
}

// finiteDiff sets dst (grown to len(cur)) to cur - old, or returns an
// error wrapping ErrDiverged naming tab if a difference is not finite.
func finiteDiff(dst, cur, old []float64, tab tasks.Table) ([]float64, error) {
	dst = grow(dst, len(cur))
	for i := range cur {
		dst[i] = cur[i] - old[i]
		if math.IsNaN(dst[i]) || math.IsInf(dst[i], 0) {
			return dst, fmt.Errorf("%w: non-finite update of table %q", ErrDiverged, tab.Spec().Name)
		}
	}
	return dst, nil
}

// push adds the change diff computed to the tables.
func (s *side) push() error {
	if err := s.t.Add(s.keys, s.deltas); err != nil {
		return err
	}
	if s.bias == nil || s.fixedBias {
		return nil
	}
	return s.bias.Add(s.keys, s.bdeltas)
}

// maxLoadedCounts bounds the tables whose counts a worker keeps in
// memory (8 bytes a key) instead of reading them with every batch.
const maxLoadedCounts = 1 << 22

// loadCounts reads every key's rating count once: they do not change
// while training, and reading them per batch costs a round trip per side.
func (s *side) loadCounts() error {
	size := s.t.Spec().Size
	if size > maxLoadedCounts {
		return nil
	}
	counts := make([]float64, size)
	keys := make([]uint64, 0, chunkKeys)
	buf := make([]float64, countWidth*chunkKeys)
	for lo := uint64(0); lo < size; lo += chunkKeys {
		keys = keys[:0]
		for k := lo; k < min(lo+chunkKeys, size); k++ {
			keys = append(keys, k)
		}
		if err := s.count.Get(keys, buf[:countWidth*len(keys)]); err != nil {
			return err
		}
		for i, k := range keys {
			counts[k] = buf[countWidth*i]
		}
	}
	s.counts = counts
	return nil
}

// MiniBatch holds a worker's reusable buffers for both sides of the
// matrix and the global bias.
type MiniBatch struct {
	rank      int
	tabs      Tables
	users     *side
	items     *side
	bias      tasks.Table // nil: no global bias
	mu, mu0   float64
	biasKey   [1]uint64
	biasVal   [1]float64
	BiasShare float64 // fraction of the global bias change this worker adds (1/workers)
	// fixedBias, fixedImp: the biases, the implicit feedback z_u are read
	// and predicted with, not trained (Tables.FixedBiases, FixedImplicit).
	fixedBias, fixedImp bool
	imp                 *implicit
	trainName           string // the training input's name, for errors
}

// NewMiniBatch prepares buffers for the tables.
func NewMiniBatch(t Tables, rank int) *MiniBatch {
	m := &MiniBatch{rank: rank, tabs: t, users: newSide(0, t.Users, t.UserBias, t.UserCount, rank),
		items: newSide(1, t.Items, t.ItemBias, t.ItemCount, rank), bias: t.Bias, BiasShare: 1,
		fixedBias: t.FixedBiases, fixedImp: t.FixedImplicit}
	m.users.fixedBias, m.items.fixedBias = t.FixedBiases, t.FixedBiases
	if t.UserImplicit != nil {
		m.imp = &implicit{rank: rank, users: t.UserImplicit, items: t.ItemImplicit}
	}
	return m
}

// gatherIDs collects the distinct users and items of records lo..hi and
// their L2 shares, without reading any model row.
func (m *MiniBatch) gatherIDs(r *datastore.Records, lo, hi int) error {
	for i := lo; i < hi; i++ {
		if _, _, err := ratingIDs(r, i, m.tabs); err != nil {
			return err
		}
	}
	for _, s := range []*side{m.users, m.items} {
		s.collect(r, lo, hi)
		if err := s.readInv(); err != nil {
			return err
		}
	}
	return nil
}

// positions returns the batch positions of record i's user and item
// (after gather or gatherIDs).
func (m *MiniBatch) positions(r *datastore.Records, i int) (int, int) {
	a := r.Offsets[i]
	pu, _ := m.users.index.Get(r.Keys[a])
	pi, _ := m.items.index.Get(r.Keys[a+1])
	return int(pu), int(pi)
}

func (m *MiniBatch) gather(r *datastore.Records, lo, hi int, counts bool) error {
	for i := lo; i < hi; i++ {
		if _, _, err := ratingIDs(r, i, m.tabs); err != nil {
			return err
		}
	}
	for _, s := range []*side{m.users, m.items} {
		s.collect(r, lo, hi)
		if err := s.read(counts); err != nil {
			return err
		}
	}
	if m.imp != nil {
		if err := m.imp.read(m.users.keys); err != nil {
			return err
		}
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
	u, v := m.positions(r, i)
	p := m.mu
	if m.users.bias != nil {
		p += m.users.b[u]
	}
	if m.items.bias != nil {
		p += m.items.b[v]
	}
	fu, fv := m.users.f[u*m.rank:(u+1)*m.rank], m.items.f[v*m.rank:(v+1)*m.rank]
	if m.imp != nil {
		z := m.imp.z(u)
		for k, x := range fu {
			p += (x + z[k]) * fv[k]
		}
		return p, u, v
	}
	for k, x := range fu {
		p += x * fv[k]
	}
	return p, u, v
}

// Step trains on records lo..hi: one Get and one Add per table. The error
// of each rating is measured just before its update (progressive
// validation). Each rating of a user shrinks the user's row and bias by
// its share 1/n_u of the per-row L2, likewise for items. A non-finite
// error or update returns an error wrapping ErrDiverged and adds nothing.
func (m *MiniBatch) Step(r *datastore.Records, lo, hi int, h Hyper) (Stats, error) {
	if err := m.gather(r, lo, hi, true); err != nil {
		return Stats{}, err
	}
	m.users.snapshot()
	m.items.snapshot()
	train := m.imp != nil && !m.fixedImp // z_u and its step move
	if train {
		m.imp.snapshot()
	}
	m.mu0 = m.mu
	var st Stats
	lr := h.LR
	// mu is in every rating: a full step per rating would make it a random
	// walk of step lr*|e|; one averaged step per batch is plain gradient
	// descent on it.
	lrMu := lr / float64(hi-lo)
	for i := lo; i < hi; i++ {
		p, u, v := m.predict(r, i)
		e := r.Labels[i] - p
		if math.IsNaN(e) || math.IsInf(e, 0) {
			return st, fmt.Errorf("%w: non-finite prediction error (%s)", ErrDiverged, r.Where(i))
		}
		st.N++
		st.SqErr += e * e
		st.AbsErr += math.Abs(e)
		su, si := m.users.inv[u], m.items.inv[v]
		if !m.fixedBias {
			if m.bias != nil {
				m.mu += lrMu * e
			}
			if m.users.bias != nil {
				m.users.b[u] += lr * (e - h.L2Bias*su*m.users.b[u])
			}
			if m.items.bias != nil {
				m.items.b[v] += lr * (e - h.L2Bias*si*m.items.b[v])
			}
		}
		lu, li := h.L2*su, h.L2*si
		fu, fv := m.users.f[u*m.rank:(u+1)*m.rank], m.items.f[v*m.rank:(v+1)*m.rank]
		if m.imp != nil && m.fixedImp {
			// The item's gradient sees the user's whole row p_u + z_u.
			z := m.imp.z(u)
			for k := range fu {
				x, y := fu[k], fv[k]
				fu[k] += lr * (e*y - lu*x)
				fv[k] += lr * (e*(x+z[k]) - li*y)
			}
			continue
		}
		if m.imp != nil {
			// The item's gradient sees the user's whole row p_u + z_u; z_u
			// moves as SGD on the y_j of N(u) would move it, and G_u keeps
			// the step for them (implicit.go).
			z, g := m.imp.z(u), m.imp.g(u)
			for k := range fu {
				x, y := fu[k], fv[k]
				step := lr * e * y
				fu[k] += step - lr*lu*x
				fv[k] += lr * (e*(x+z[k]) - li*y)
				z[k] += step
				g[k] += step
			}
			continue
		}
		for k := range fu {
			x, y := fu[k], fv[k]
			fu[k] += lr * (e*y - lu*x)
			fv[k] += lr * (e*x - li*y)
		}
	}
	m.biasVal[0] = (m.mu - m.mu0) * m.BiasShare
	if m.bias != nil && !m.fixedBias && (math.IsNaN(m.biasVal[0]) || math.IsInf(m.biasVal[0], 0)) {
		return st, fmt.Errorf("%w: non-finite update of table %q", ErrDiverged, m.bias.Spec().Name)
	}
	for _, s := range []*side{m.users, m.items} {
		if err := s.diff(); err != nil {
			return st, err
		}
	}
	if train {
		if err := m.imp.diff(); err != nil {
			return st, err
		}
	}
	for _, s := range []*side{m.users, m.items} {
		if err := s.push(); err != nil {
			return st, err
		}
	}
	if train {
		if err := m.imp.users.Add(m.users.keys, m.imp.deltas); err != nil {
			return st, err
		}
	}
	if m.bias != nil && !m.fixedBias {
		if err := m.bias.Add(m.biasKey[:], m.biasVal[:]); err != nil {
			return st, err
		}
	}
	return st, nil
}

// Eval scores records lo..hi without updating.
func (m *MiniBatch) Eval(r *datastore.Records, lo, hi int) (Stats, error) {
	if err := m.gather(r, lo, hi, false); err != nil {
		return Stats{}, err
	}
	var st Stats
	for i := lo; i < hi; i++ {
		p, _, _ := m.predict(r, i)
		e := r.Labels[i] - p
		st.N++
		st.SqErr += e * e
		st.AbsErr += math.Abs(e)
	}
	return st, nil
}

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}
