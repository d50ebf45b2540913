package kge

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// Hyper are one epoch's hyper-parameters.
type Hyper struct {
	LR, L2 float64
}

// example is a positive triple (label +1) or a corruption (label -1).
type example struct {
	x     Triple
	label float64
}

// batch is a mini-batch with its negatives already drawn, so its key set
// is known before training on it.
type batch struct {
	ex  []example
	neg int // negatives per positive
}

// batchKeys returns the distinct entities and relations a batch touches,
// negatives included, in first-use order. This is the set a worker reads
// (Get) and writes (Add) for the batch, and the set to localize ahead of
// use.
func batchKeys(b *batch) (ents, rels []uint64) {
	seenE, seenR := map[uint64]struct{}{}, map[uint64]struct{}{}
	for _, e := range b.ex {
		for _, k := range []uint64{e.x.H, e.x.T} {
			if _, ok := seenE[k]; !ok {
				seenE[k] = struct{}{}
				ents = append(ents, k)
			}
		}
		if _, ok := seenR[e.x.R]; !ok {
			seenR[e.x.R] = struct{}{}
			rels = append(rels, e.x.R)
		}
	}
	return ents, rels
}

// MiniBatch is a worker's trainer: its random source for negatives and
// its reusable buffers.
type MiniBatch struct {
	ents, rels tasks.Table
	dim        int
	nEnt, nRel uint64
	neg        int
	rng        *rand.Rand
	entIdx     *tasks.KeyIndex
	relIdx     *tasks.KeyIndex
	e, e0      []float64
	r, r0      []float64
	gh, gr, gt []float64
	deltas     []float64
}

// NewMiniBatch prepares a trainer drawing neg corruptions per positive
// from seed.
func NewMiniBatch(ents, rels tasks.Table, dim, neg int, seed uint64) *MiniBatch {
	ns, rs := ents.Spec().Size, rels.Spec().Size
	return &MiniBatch{ents: ents, rels: rels, dim: dim, nEnt: ns, nRel: rs, neg: neg,
		rng: rand.New(rand.NewPCG(seed, 0x6b6765)), entIdx: tasks.NewKeyIndex(ns), relIdx: tasks.NewKeyIndex(rs),
		gh: make([]float64, 2*dim), gr: make([]float64, 2*dim), gt: make([]float64, 2*dim)}
}

// sample reads records lo..hi as triples and draws the negatives: each
// corrupts the head or the tail (equal odds) with a uniform entity.
func (m *MiniBatch) sample(r *datastore.Records, lo, hi int) (*batch, error) {
	b := &batch{neg: m.neg, ex: make([]example, 0, (hi-lo)*(1+m.neg))}
	for i := lo; i < hi; i++ {
		x, err := TripleAt(r, i)
		if err != nil {
			return nil, err
		}
		if x.H >= m.nEnt || x.T >= m.nEnt {
			return nil, fmt.Errorf("%s: triple (%d %d %d): entity beyond table %q's size %d (ids 0..%d)", r.Where(i), x.H, x.R, x.T, m.ents.Spec().Name, m.nEnt, m.nEnt-1)
		}
		if x.R >= m.nRel {
			return nil, fmt.Errorf("%s: triple (%d %d %d): relation beyond table %q's size %d (ids 0..%d)", r.Where(i), x.H, x.R, x.T, m.rels.Spec().Name, m.nRel, m.nRel-1)
		}
		b.ex = append(b.ex, example{x: x, label: 1})
		for j := 0; j < m.neg; j++ {
			c := x
			if m.rng.IntN(2) == 0 {
				c.H = m.rng.Uint64N(m.nEnt)
			} else {
				c.T = m.rng.Uint64N(m.nEnt)
			}
			b.ex = append(b.ex, example{x: c, label: -1})
		}
	}
	return b, nil
}

// Stats are a batch's or an epoch's training counts.
type Stats struct {
	N       int64   // positive triples
	LossSum float64 // softplus loss, positives plus the mean over their negatives
}

// Add accumulates o.
func (s *Stats) Add(o Stats) { s.N += o.N; s.LossSum += o.LossSum }

// Step trains on records lo..hi: it draws the negatives, reads the rows
// of batchKeys (one Get per table), runs SGD on the local copy and adds
// the differences back (one Add per table).
func (m *MiniBatch) Step(r *datastore.Records, lo, hi int, h Hyper) (Stats, error) {
	b, err := m.sample(r, lo, hi)
	if err != nil {
		return Stats{}, err
	}
	return m.train(b, h)
}

// Prepared is a sampled batch whose entity rows are on their way to the
// worker's slave (Prepare), to be trained by Train.
type Prepared struct {
	b       *batch
	pending kvstore.Pending
}

// Prepare draws the batch of records lo..hi and starts moving its
// entities' rows to the worker's slave (LocalizeAsync), so that they are
// local by the time Train reads them: call it for the next batch before
// training the current one. Relations are few and used by every batch of
// every worker: they stay where they are.
func (m *MiniBatch) Prepare(r *datastore.Records, lo, hi int) (*Prepared, error) {
	b, err := m.sample(r, lo, hi)
	if err != nil {
		return nil, err
	}
	ents, _ := batchKeys(b)
	p, err := m.ents.LocalizeAsync(ents)
	if err != nil {
		return nil, err
	}
	return &Prepared{b: b, pending: p}, nil
}

// Train trains a prepared batch (its rows are read wherever they are; a
// move still under way only makes the read wait at the new owner).
func (m *MiniBatch) Train(p *Prepared, h Hyper) (Stats, error) { return m.train(p.b, h) }

func (m *MiniBatch) train(b *batch, h Hyper) (Stats, error) {
	ents, rels := batchKeys(b)
	w := 2 * m.dim
	m.entIdx.Reset()
	m.relIdx.Reset()
	for i, k := range ents {
		m.entIdx.Put(k, int32(i))
	}
	for i, k := range rels {
		m.relIdx.Put(k, int32(i))
	}
	m.e, m.r = grow(m.e, len(ents)*w), grow(m.r, len(rels)*w)
	if err := m.ents.Get(ents, m.e); err != nil {
		return Stats{}, err
	}
	if err := m.rels.Get(rels, m.r); err != nil {
		return Stats{}, err
	}
	m.e0, m.r0 = append(m.e0[:0], m.e...), append(m.r0[:0], m.r...)
	var st Stats
	negW := 1 / float64(max(b.neg, 1))
	for _, ex := range b.ex {
		wgt := 1.0
		if ex.label < 0 {
			wgt = negW
		} else {
			st.N++
		}
		st.LossSum += wgt * m.update(ex, wgt, h)
	}
	m.deltas = grow(m.deltas, len(m.e))
	for i := range m.e {
		m.deltas[i] = m.e[i] - m.e0[i]
	}
	if err := m.ents.Add(ents, m.deltas); err != nil {
		return st, err
	}
	m.deltas = m.deltas[:len(m.r)]
	for i := range m.r {
		m.deltas[i] = m.r[i] - m.r0[i]
	}
	return st, m.rels.Add(rels, m.deltas)
}

// update is one SGD step on the softplus loss log(1+exp(-y*s)) with L2,
// returning the loss before the step.
func (m *MiniBatch) update(ex example, wgt float64, hp Hyper) float64 {
	w, d := 2*m.dim, m.dim
	pi, _ := m.entIdx.Get(ex.x.H)
	ri, _ := m.relIdx.Get(ex.x.R)
	ti, _ := m.entIdx.Get(ex.x.T)
	h, r, t := m.e[int(pi)*w:int(pi+1)*w], m.r[int(ri)*w:int(ri+1)*w], m.e[int(ti)*w:int(ti+1)*w]
	s := score(h, r, t, d)
	z := -ex.label * s
	loss := softplus(z)
	g := -ex.label * sigmoid(z) * wgt // dloss/ds
	for k := 0; k < d; k++ {
		hr, hi, rr, rim, tr, tim := h[k], h[d+k], r[k], r[d+k], t[k], t[d+k]
		m.gh[k], m.gh[d+k] = rr*tr+rim*tim, rr*tim-rim*tr
		m.gr[k], m.gr[d+k] = hr*tr+hi*tim, hr*tim-hi*tr
		m.gt[k], m.gt[d+k] = hr*rr-hi*rim, hi*rr+hr*rim
	}
	lr, l2 := hp.LR, hp.L2*wgt
	for k := 0; k < w; k++ {
		h[k] -= lr * (g*m.gh[k] + l2*h[k])
		r[k] -= lr * (g*m.gr[k] + l2*r[k])
		t[k] -= lr * (g*m.gt[k] + l2*t[k])
	}
	return loss
}

func softplus(z float64) float64 {
	if z > 30 {
		return z
	}
	return math.Log1p(math.Exp(z))
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}
