package lr

import (
	"fmt"
	"math"
	"slices"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
)

// Stats are a batch's or an epoch's counts.
type Stats struct {
	N       int64
	LossSum float64
	Correct int64
}

// Add accumulates o.
func (s *Stats) Add(o Stats) { s.N += o.N; s.LossSum += o.LossSum; s.Correct += o.Correct }

// Table is the part of a table LR uses.
type Table interface {
	Get(keys []uint64, out []float64) error
	Add(keys []uint64, deltas []float64) error
}

// MiniBatch holds a worker's reusable buffers: the batch's distinct keys,
// their weights and gradients, and a key -> position index (a hash table
// sized to the batch, see batchIndex).
type MiniBatch struct {
	t    Table
	bias Table // intercept (one key), nil without
	// FixedBias is the intercept of a stage that fits none (bias nil):
	// one an earlier stage fitted, kept as it is, or 0.
	FixedBias float64
	scale     *Scaler // feature scales, nil when training on raw values
	// cent are the centered features (nil: none), added to every
	// training batch.
	cent *Centered
	// finite is false once a batch produced a non-finite update (which
	// was then not sent).
	finite bool
	batchState
	// ahead is the next batch's state while its read travels; next is
	// the batch SetNext named.
	ahead batchState
	next  span
	grad  []float64
	index batchIndex
	// T is the number of steps (of all workers) since the table last held
	// the weights themselves, for Step's lazy l2: with l2 > 0 the table
	// holds w / (1 - lr l2)^T. The caller sets it before each Step and
	// multiplies the table by (1 - lr l2)^steps at the end of an epoch.
	T float64
	// Occurrences makes a batch read and update its features' keys as
	// they occur, duplicates and all, instead of each distinct key once:
	// for a table in this process's memory under chunk locks (the local
	// and single kinds) finding the distinct keys costs more than reading
	// and adding the repeated ones. The update is the same: a repeated
	// key's reads give the same value and its deltas add up. Training
	// with centered features keeps distinct keys: their intercept term
	// needs each centered key's whole gradient in one place. (The hogwild
	// kind merges its hot keys' repeats instead, see Merge: a hot key
	// added once per occurrence, by every worker at once, bounces its
	// cache line between the cores.)
	Occurrences bool
	// Merge, for the hogwild kind, keeps a batch's keys as they occur
	// but merges the repeats a small direct-mapped filter remembers: the
	// hot keys, which every row repeats, so that a worker adds each about
	// once per batch (its atomic adds of a hot key would bounce the line
	// between the cores), without paying to find every distinct key. A
	// key the filter forgot is read and added twice, which is the same
	// update. Centered training keeps exact distinct keys.
	Merge bool
	merge mergeFilter
	// trainLabels and testLabels are where Step's and Eval's records
	// had their first 0 and -1 labels (both in one data set: refused).
	trainLabels, testLabels Negatives
}

// mergeFilter is Merge's direct-mapped filter: slot h holds the key tag[h]
// and its position in the batch's keys, valid in batch gen[h] only.
type mergeFilter struct {
	tag [mergeSlots]uint64
	pos [mergeSlots]int32
	gen [mergeSlots]uint32
	cur uint32
}

// mergeSlots is the filter's size: a batch's hot keys (a few hundred
// for Zipf-distributed features) in 16 KiB, within a core's L1 cache.
const (
	mergeBits  = 10
	mergeSlots = 1 << mergeBits
)

// batchState is what reading one batch fills.
type batchState struct {
	keys []uint64
	// ident: keys are the batch's feature occurrences themselves (a
	// slice of the records' keys, read and never written: Occurrences),
	// so occurrence j is key j and pos is not used; own is the keys'
	// buffer of the other ways.
	ident bool
	own   []uint64
	w     []float64
	pos   []int32 // pos[j]: position in keys of the batch's j-th feature occurrence
	cpos  []int32 // cpos[j]: cent.Keys[j]'s position in keys
	inv   []float64
	base  int     // r.Offsets[lo] of the batch
	b     float64 // the intercept read with the batch
	// one is the intercept's value buffer, on the heap once (a slice of
	// a local would escape through the Table interface every batch; an
	// array in the struct would not follow it when Step swaps states
	// while a read into it travels).
	one []float64
	// reads in flight: the weights' and the intercept's (nil: none)
	wr, br kvstore.Pending
	from   span // the batch read ahead into this state (r nil: none)
}

// span is records lo..hi of r.
type span struct {
	r      *datastore.Records
	lo, hi int
}

// NewMiniBatch prepares buffers for table t.
func NewMiniBatch(t Table) *MiniBatch {
	m := &MiniBatch{t: t, finite: true}
	m.one, m.ahead.one = make([]float64, 1), make([]float64, 1)
	return m
}

// gather collects the distinct keys of records lo..hi (and with center the
// centered features) and reads their weights, times cur (the table holds
// w / cur).
func (m *MiniBatch) gather(r *datastore.Records, lo, hi int, cur float64, center bool) error {
	m.collect(&m.batchState, r, lo, hi, center)
	// The intercept's read travels with the weights' (one round trip).
	if ab, ok := m.bias.(asyncGetter); ok {
		var err error
		if m.br, err = ab.GetAsync(biasKey, m.one); err != nil {
			return err
		}
	}
	m.w = grow(m.w, len(m.keys))
	if err := m.t.Get(m.keys, m.w); err != nil {
		return err // the stage ends; the intercept's read is not waited for
	}
	return m.finish(cur)
}

// collect fills st with the keys of records lo..hi: their occurrences
// themselves (Occurrences), the occurrences with the filter's repeats
// merged (Merge), or the distinct keys (and with center the centered
// features); but for occurrences, with the features' positions among them.
func (m *MiniBatch) collect(st *batchState, r *datastore.Records, lo, hi int, center bool) {
	st.base = r.Offsets[lo]
	occ := r.Keys[st.base:r.Offsets[hi]]
	center = center && m.cent != nil
	st.cpos = st.cpos[:0]
	if m.Occurrences && !center {
		st.keys, st.ident = occ, true // see Occurrences
		return
	}
	st.keys, st.ident = st.own[:0], false
	if m.Merge && !center {
		m.merged(st, occ)
	} else {
		m.distinct(st, occ, center)
	}
	st.own = st.keys
}

// distinct fills st with the distinct keys occ (and with center the
// centered features) through the batch's index.
func (m *MiniBatch) distinct(st *batchState, occ []uint64, center bool) {
	n := len(occ)
	if center {
		n += len(m.cent.Keys)
	}
	m.index.Reset(n)
	m.index.Touch(occ)
	if cap(st.pos) < len(occ) {
		st.pos = make([]int32, len(occ))
	}
	st.pos = st.pos[:len(occ)]
	for j, k := range occ {
		p, added := m.index.Lookup(k, int32(len(st.keys)), st.keys)
		if added {
			st.keys = append(st.keys, k)
		}
		st.pos[j] = p
	}
	if center {
		for _, k := range m.cent.Keys {
			p, added := m.index.Lookup(k, int32(len(st.keys)), st.keys)
			if added {
				st.keys = append(st.keys, k)
			}
			st.cpos = append(st.cpos, p)
		}
	}
}

// merged fills st with the keys occ as they are, the repeats the filter
// remembers merged (see Merge).
func (m *MiniBatch) merged(st *batchState, occ []uint64) {
	f := &m.merge
	f.cur++
	if f.cur == 0 { // wrapped: forget every slot's batch
		clear(f.gen[:])
		f.cur = 1
	}
	if cap(st.pos) < len(occ) {
		st.pos = make([]int32, len(occ))
	}
	st.pos = st.pos[:len(occ)]
	// Without a branch on hit or miss (a hot key's repeats and the cold
	// keys interleave, so such a branch is a coin toss): every key is
	// written at the keys' end, which a miss then extends, and the slot
	// is always rewritten (on a hit with what it held).
	base := len(st.keys)
	keys := slices.Grow(st.keys, len(occ))[:base+len(occ)]
	n := base
	for j, k := range occ {
		h := (k * fib) >> (64 - mergeBits)
		x := uint64(f.gen[h]^f.cur) | (f.tag[h] ^ k) // 0: a hit
		p, held := int32(n), f.pos[h]                // loaded either way: a conditional move
		if x == 0 {
			p = held
		}
		miss := 0
		if x != 0 {
			miss = 1
		}
		keys[n] = k
		n += miss
		f.tag[h], f.pos[h], f.gen[h] = k, p, f.cur
		st.pos[j] = p
	}
	st.keys = keys[:n]
}

// finish completes the current batch's read: waits for reads in flight,
// scales the weights by cur and looks up the features' scales.
func (m *MiniBatch) finish(cur float64) error {
	if m.wr != nil {
		err := m.wr.Wait()
		m.wr = nil
		if err != nil {
			return err
		}
	}
	if cur != 1 {
		for i := range m.w {
			m.w[i] *= cur
		}
	}
	if m.scale != nil {
		m.inv = grow(m.inv, len(m.keys))
		if err := m.scale.Lookup(m.keys, m.inv); err != nil {
			return err
		}
	}
	m.b = m.FixedBias
	if m.br != nil {
		err := m.br.Wait()
		m.br = nil
		if err != nil {
			return err
		}
		m.b = m.one[0]
	} else if m.bias != nil {
		if err := m.bias.Get(biasKey, m.one); err != nil {
			return err
		}
		m.b = m.one[0]
	}
	return nil
}

// SetNext names the batch the next Step trains on, records lo..hi of r,
// so that this Step starts reading its weights (and intercept) before it
// computes its own: the read is gated at the worker's next clock
// (kvstore.TableClient.GetNext), so it stays within the staleness bound,
// and it may miss this Step's own update. A table without GetNext (the
// local kinds') reads at the next Step as usual. r
// must stay valid until that Step returns.
func (m *MiniBatch) SetNext(r *datastore.Records, lo, hi int) {
	m.next = span{r, lo, hi}
}

// startNext starts reading the batch SetNext named into m.ahead, when the
// table can read ahead.
func (m *MiniBatch) startNext() error {
	next := m.next
	m.next = span{}
	nt, ok := m.t.(nextGetter)
	if !ok {
		return nil
	}
	st := &m.ahead
	m.collect(st, next.r, next.lo, next.hi, true)
	if nb, ok := m.bias.(nextGetter); ok {
		var err error
		if st.br, err = nb.GetNext(biasKey, st.one); err != nil {
			return err
		}
	}
	st.w = grow(st.w, len(st.keys))
	var err error
	if st.wr, err = nt.GetNext(st.keys, st.w); err != nil {
		return err
	}
	st.from = next
	return nil
}

// nextGetter is a Table that can read the next iteration's values before
// this one ends (kvstore.TableClient.GetNext).
type nextGetter interface {
	GetNext(keys []uint64, out []float64) (kvstore.Pending, error)
}

var biasKey = []uint64{0}

// asyncGetter is a Table that can start a read and return at once (the
// tables of a stage can; see tasks.Table.GetAsync).
type asyncGetter interface {
	GetAsync(keys []uint64, out []float64) (kvstore.Pending, error)
}

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

// binaryLabel maps a label to {0, 1}: 1 is positive, 0 and -1 negative.
// Anything else (a multi-class or regression file given to a binary
// classifier) is an error rather than a silent "> 0 is positive".
func binaryLabel(l float64) (float64, error) {
	switch l {
	case 1:
		return 1, nil
	case 0, -1:
		return 0, nil
	}
	return 0, fmt.Errorf("lr: label %v: binary logistic regression takes labels 1 (positive) and 0 or -1 (negative)", l)
}

// Sigmoid is the logistic function, stable for large |z|.
func Sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// LossGrad is LogLoss(z, y) and Sigmoid(z) - y, bit for bit, with one
// exponential for both.
func LossGrad(z, y float64) (loss, g float64) {
	h, e, g := lossParts(z, y)
	return h + math.Log1p(e), g
}

// lossParts is LossGrad's loss as h + log1p(e) (LogLoss's branches:
// log1p(exp(-|z|)), plus |z| when the label disagrees with z's sign; z = 0
// counts as positive for y = 0 and adds -z = 0 for y = 1) and its
// gradient g.
func lossParts(z, y float64) (h, e, g float64) {
	var s float64
	if z >= 0 {
		e = math.Exp(-z)
		s = 1 / (1 + e)
	} else {
		e = math.Exp(z)
		s = e / (1 + e)
	}
	switch {
	case y <= 0 && z >= 0:
		h = z
	case y > 0 && z <= 0:
		h = -z
	}
	return h, e, s - y
}

// lossSum adds up a batch's losses h + log1p(e) with one logarithm per
// batch: the sum of the logs is the log of the product of the (1 + e),
// each in [1, 2], taken before it could overflow. A log1p per record was
// 5% of a local worker's time. The sum differs from adding LogLoss's in
// the last bits (and loses the terms e < 2^-53 below 1e-16 each); it is
// reported, never trained on. The zero value is an empty sum.
type lossSum struct {
	h float64
	// p is the product of the (1 + e) not yet logged, less one (so that
	// the zero value is the empty product).
	p float64
}

func (l *lossSum) add(h, e float64) {
	l.h += h
	prod := (l.p + 1) * (1 + e)
	if prod > 0x1p900 {
		l.h += math.Log(prod)
		prod = 1
	}
	l.p = prod - 1
}

func (l *lossSum) total() float64 { return l.h + math.Log(l.p+1) }

// LogLoss is the logistic loss of margin z for label y in {0, 1}.
func LogLoss(z float64, y float64) float64 {
	// log(1 + exp(-z)) for y = 1, log(1 + exp(z)) for y = 0, computed stably.
	if y <= 0 {
		z = -z
	}
	if z > 0 {
		return math.Log1p(math.Exp(-z))
	}
	return -z + math.Log1p(math.Exp(z))
}

// margin is b + w.x of the record whose features are r's [a, b), with x
// scaled when the batch has scales.
func (m *MiniBatch) margin(a int, vals []float64) float64 {
	z := m.b
	if m.ident { // occurrence j is key j
		w := m.w[a-m.base:][:len(vals)]
		if m.scale != nil {
			inv := m.inv[a-m.base:][:len(vals)]
			for j, v := range vals {
				z += w[j] * v * inv[j]
			}
			return z
		}
		for j, v := range vals {
			z += w[j] * v
		}
		return z
	}
	pos := m.pos[a-m.base:]
	if m.scale != nil {
		for j, v := range vals {
			p := pos[j]
			z += m.w[p] * v * m.inv[p]
		}
		return z
	}
	for j, v := range vals {
		z += m.w[pos[j]] * v
	}
	return z
}

// Step trains on records lo..hi: one Get, one Add. Loss and accuracy are
// measured with the weights before the update (progressive validation).
//
// l2 regularization, w <- (1 - lr l2) w at every step for every key, is
// applied lazily and exactly: the table holds v = w / a^T (a = 1 - lr l2,
// T = m.T steps so far), which steps that do not touch a key leave
// unchanged; a batch reads its keys' v, recovers w = a^T v, and adds its
// gradient step in v's units at step T+1, -lr g / a^(T+1). The caller
// turns v back into w (multiplies the table by a^T) when the epoch ends.
//
// With centered features (m.cent) the step is SGD on the centered
// standardized features x' = x inv - C with intercept b' = b + C.w: the
// centered keys' gradient loses C_k times the batch's mean residual, and
// the intercept the table holds, the raw-space b = b' - C.w, moves by the step of b'
// step minus C times the centered keys' change. Centered keys are in every
// batch, so this is exact without any lazy term.
func (m *MiniBatch) Step(r *datastore.Records, lo, hi int, lr, l2 float64) (Stats, error) {
	cur, next := 1.0, 1.0
	if l2 > 0 {
		a := 1 - lr*l2
		if !(a > 0) {
			return Stats{}, fmt.Errorf("lr %g x l2 %g >= 1: every step would flip the weights' sign; lower lr or l2", lr, l2)
		}
		cur = math.Pow(a, m.T)
		next = cur * a
		if next < minDecay {
			return Stats{}, fmt.Errorf("l2 %g with lr %g shrinks the weights below %g within one epoch (%g steps): lower l2 or lr", l2, lr, minDecay, m.T+1)
		}
	}
	if f := m.ahead.from; f.r != nil { // read ahead by the previous Step
		if f != (span{r, lo, hi}) {
			return Stats{}, fmt.Errorf("lr: Step on records %d..%d, but the previous Step read %d..%d ahead", lo, hi, f.lo, f.hi)
		}
		m.batchState, m.ahead = m.ahead, m.batchState
		m.from = span{}
		if err := m.finish(cur); err != nil {
			return Stats{}, err
		}
	} else if err := m.gather(r, lo, hi, cur, true); err != nil {
		return Stats{}, err
	}
	if m.next.r != nil {
		if err := m.startNext(); err != nil {
			return Stats{}, err
		}
	}
	m.grad = grow(m.grad, len(m.keys))
	clear(m.grad)
	var st Stats
	gsum := 0.0
	var loss lossSum
	for i := lo; i < hi; i++ {
		a, b := r.Offsets[i], r.Offsets[i+1]
		vals := r.Vals[a:b]
		y, err := labelOf(r, i, &m.trainLabels)
		if err != nil {
			return st, err
		}
		z := m.margin(a, vals)
		st.N++
		h, e, g := lossParts(z, y)
		loss.add(h, e)
		if (z > 0) == (y == 1) {
			st.Correct++
		}
		gsum += g
		if m.ident { // occurrence j is key j
			grad := m.grad[a-m.base:][:len(vals)]
			if m.scale != nil {
				inv := m.inv[a-m.base:][:len(vals)]
				for j, v := range vals {
					grad[j] += g * v * inv[j]
				}
			} else {
				for j, v := range vals {
					grad[j] += g * v
				}
			}
			continue
		}
		pos := m.pos[a-m.base:]
		if m.scale != nil {
			for j, v := range vals {
				m.grad[pos[j]] += g * v * m.inv[pos[j]]
			}
		} else {
			for j, v := range vals {
				m.grad[pos[j]] += g * v
			}
		}
	}
	st.LossSum = loss.total()
	scale := -lr / float64(hi-lo)
	db := scale * gsum // the raw intercept's step
	if m.cent != nil {
		shrink := next/cur - 1 // the l2 part of a step: w' (a - 1)
		for j, p := range m.cpos {
			c := m.cent.C[j]
			m.grad[p] -= gsum * c
			db -= c * (shrink*m.w[p] + scale*m.grad[p])
		}
	}
	// Every delta finite (a NaN or infinity fails the compare), checked
	// without a chain of dependent adds through the batch's keys.
	finite := math.Abs(db) <= math.MaxFloat64
	f := scale / next
	for i, d := range m.grad {
		d *= f
		m.grad[i] = d
		if !(math.Abs(d) <= math.MaxFloat64) {
			finite = false
		}
	}
	if !finite {
		m.finite = false // not sent: the caller stops the stage
		return st, nil
	}
	if m.bias != nil {
		m.one[0] = db
		if err := m.bias.Add(biasKey, m.one); err != nil {
			return st, err
		}
	}
	return st, m.t.Add(m.keys, m.grad)
}

// Eval scores records lo..hi without updating (the table holds w).
func (m *MiniBatch) Eval(r *datastore.Records, lo, hi int) (Stats, error) {
	if err := m.gather(r, lo, hi, 1, false); err != nil {
		return Stats{}, err
	}
	var st Stats
	for i := lo; i < hi; i++ {
		a, b := r.Offsets[i], r.Offsets[i+1]
		y, err := labelOf(r, i, &m.testLabels)
		if err != nil {
			return st, err
		}
		z := m.margin(a, r.Vals[a:b])
		st.N++
		st.LossSum += LogLoss(z, y)
		if (z > 0) == (y == 1) {
			st.Correct++
		}
	}
	return st, nil
}
