package svrg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/examples/lr"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// SGDConfig is svrg.sgd's parameters.
type SGDConfig struct {
	EpochsInner int
	// MinSteps is the fewest steps the stage takes (all workers
	// together), whatever the data size.
	MinSteps int
	Batch    int
	// LR is the step size; 0 (the param absent) chooses it from the data:
	// 1/L, L estimated on each worker's first 2048 records (autoLR).
	LR    float64
	L2    float64
	Train string
}

// defaultMinSteps is min_steps' default: on small data one pass is a
// handful of steps, far too few for an ill-conditioned problem (455
// breast cancer rows in batches of 50: 10 steps a round), while larger
// data sets (50,000 rows in batches of 50) take as many in one pass.
const defaultMinSteps = 1000

// SGDConfigFrom reads and checks the stage parameters.
func SGDConfigFrom(p tasks.Params) (SGDConfig, error) {
	if err := p.Known("epochs_inner", "min_steps", "batch", "lr", "l2", "intercept", "standardize", "train"); err != nil {
		return SGDConfig{}, fmt.Errorf("svrg.sgd: %w", err)
	}
	if err := p.Check("epochs_inner", "min_steps", "batch", "lr", "l2"); err != nil {
		return SGDConfig{}, err
	}
	if err := p.CheckInt("epochs_inner", "min_steps", "batch"); err != nil {
		return SGDConfig{}, err
	}
	c := SGDConfig{EpochsInner: p.Int("epochs_inner", 1), MinSteps: p.Int("min_steps", defaultMinSteps), Batch: p.Int("batch", 100),
		LR: p.Float("lr", 0), L2: p.Float("l2", 0), Train: p.String("train", "train")}
	_, explicitLR := p["lr"]
	switch {
	case c.EpochsInner < 1:
		return c, fmt.Errorf("svrg: epochs_inner must be >= 1, got %d", c.EpochsInner)
	case c.MinSteps < 0:
		return c, fmt.Errorf("svrg: min_steps must be >= 0, got %d", c.MinSteps)
	case c.Batch < 1:
		return c, fmt.Errorf("svrg: batch must be >= 1, got %d", c.Batch)
	case explicitLR && !(c.LR > 0):
		return c, fmt.Errorf("svrg: lr must be > 0, got %v", c.LR)
	case c.L2 < 0:
		return c, fmt.Errorf("svrg: l2 must be >= 0, got %v", c.L2)
	}
	return c, nil
}

// SGD is the svrg.sgd stage function (see the package doc).
func SGD(info *tasks.Info) error {
	if err := info.RequireBSP("svrg.sgd"); err != nil {
		return err
	}
	cfg, err := SGDConfigFrom(info.Params)
	if err != nil {
		return err
	}
	w, snap, mu, nt, err := tables(info)
	if err != nil {
		return err
	}
	opts, err := modelOptsFrom(info.Params, w)
	if err != nil {
		return err
	}
	train, err := info.Input(cfg.Train)
	if err != nil {
		return err
	}
	if err := tasks.CheckFormat(train, cfg.Train, "svrg.sgd", "libsvm", "csv"); err != nil {
		return err
	}
	dim := w.Spec().Size
	keys := allKeys(dim)
	sv, mv := make([]float64, dim), make([]float64, dim)
	if err := snap.Get(keys, sv); err != nil {
		return err
	}
	if err := mu.Get(keys, mv); err != nil {
		return err
	}
	one := make([]float64, 1)
	if err := nt.Get(keys[:1], one); err != nil {
		return err
	}
	if one[0] < 1 {
		return fmt.Errorf("svrg: table %q holds no sample count: run svrg.full before svrg.sgd", TableN)
	}
	s := &step{w: w, snap: sv, mu: mv, lr: cfg.LR, l2: cfg.L2, stamp: make([]uint32, dim), pos: make([]int32, dim)}
	if opts.Intercept {
		if s.b, s.bstate, err = biasTables(info); err != nil {
			return err
		}
		bs := make([]float64, biasStateSize)
		if err := s.bstate.Get(allKeys(biasStateSize), bs); err != nil {
			return err
		}
		if bs[keyMarker] != 1 {
			return fmt.Errorf("svrg.sgd: stage %q has intercept = true but the svrg.full stage before it ran with intercept = false: set intercept the same in both stages", info.StageName)
		}
		s.snapB, s.muB = bs[keySnapBias], bs[keyMuBias]
	} else {
		if s.fixedB, err = fixedBias(info, opts); err != nil {
			return err
		}
		s.snapB = s.fixedB
	}
	// Every worker takes the same number of steps so that the workers
	// stay in lockstep and the stage's steps total epochs_inner passes,
	// and at least min_steps (the last inner epoch takes the extra).
	workers := int64(max(info.Workers, 1))
	perEpoch := int64(math.Ceil(one[0] / float64(workers*int64(cfg.Batch))))
	mine := max(perEpoch*int64(cfg.EpochsInner), (int64(cfg.MinSteps)+workers-1)/workers)
	total := mine * workers
	var inv []float64 // 1/scale_k, nil without standardization
	if opts.Standardize {
		st, err := info.Table(lr.ScaleTable(TableW))
		if err != nil {
			return fmt.Errorf("svrg: standardize: %w (or set standardize = false)", err)
		}
		sc, err := lr.PrepareScale(info, st, dim, train)
		if err != nil {
			return err
		}
		if opts.Intercept {
			// Without an intercept centering would change the model.
			s.cent = sc.Center()
		}
		inv = make([]float64, dim)
		if err := sc.Lookup(keys, inv); err != nil {
			return err
		}
		s.withL2(inv, cfg.L2)
	}
	in := &stream{in: train}
	defer in.close()
	// Lockstep: ps workers take their steps of a clock from the same
	// weights (BSP), and the other kinds' see each other's steps at once.
	lockstep := info.WorkerKind == tasks.KindPS && info.Workers > 1
	if info.Workers > 1 {
		// The lazy updates take a worker's s-th step as step s W + rank
		// of the stage, which holds while every worker's clock counts its
		// steps. A pass that starts again may be starved at its epoch's
		// end (the master holds the next pass until every block of this
		// one is finished), and a starved worker ticks its clock without
		// a step: the workers' steps drift apart by as many, and a capped
		// key's lazy factor amplifies the gap (a^-drift: models with
		// accuracy 0.48 on 2 ps workers with replicas = 2; 2 local
		// workers' objective rose round over round). So the share is
		// read once, into memory, the clocks are lined up by a Barrier,
		// and the steps cycle over the share without another pass.
		if err := in.load(info.Ctx); err != nil {
			return fmt.Errorf("svrg.sgd: stage %q: %w", info.StageName, err)
		}
		if err := info.Barrier(); err != nil {
			return err
		}
	}
	if cfg.LR == 0 {
		var sample datastore.Records
		if err := in.next(info.Ctx, &sample, max(cfg.Batch, curvatureRows)); err != nil {
			return err
		}
		if s.lr, err = autoLR(info, s, &sample, inv); err != nil {
			return err
		}
		if lockstep {
			// W ps workers under BSP take their steps of a clock from the
			// same weights: together one step of W times the size, which
			// 1/L each takes past the stable range from 4 workers on
			// (accuracy 0.68-0.75 where one worker reaches 0.83). 1/(W L)
			// keeps a clock's steps together at 1/L.
			s.lr /= float64(info.Workers)
		}
	}
	var batch datastore.Records
	if err := in.next(info.Ctx, &batch, cfg.Batch); err != nil {
		return err
	}
	s.setDense(inv, total)
	steps := int64(0)
	for epoch := 1; epoch <= cfg.EpochsInner; epoch++ {
		var st lr.Stats
		n := perEpoch
		if epoch == cfg.EpochsInner {
			n = mine - steps
		}
		for range n {
			if steps > 0 {
				if err := in.next(info.Ctx, &batch, cfg.Batch); err != nil {
					return err
				}
			}
			bs, err := s.run(&batch, 0, batch.Len(), float64(steps*workers+int64(info.Rank)))
			if err != nil {
				return err
			}
			if !s.finite {
				return fmt.Errorf("svrg.sgd: stage %q inner epoch %d step %d: the update became non-finite (loss %v): the learning rate (lr = %g) is likely too large", info.StageName, epoch, steps+1, bs.LossSum/float64(max(bs.N, 1)), s.lr)
			}
			steps++
			st.Add(bs)
			info.Report(bs.N, bs.LossSum)
			if err := info.Clock(); err != nil {
				return err
			}
		}
		if st.N > 0 && st.LossSum/float64(st.N) > divergedLoss {
			return fmt.Errorf("svrg.sgd: stage %q inner epoch %d: mean training loss %.3g: training diverged; the learning rate (lr = %g) is likely too large", info.StageName, epoch, st.LossSum/float64(st.N), s.lr)
		}
		info.ReportEpoch(epoch, map[string]float64{tasks.MetricSamples: float64(st.N), tasks.MetricLossSum: st.LossSum, tasks.MetricCorrect: float64(st.Correct)})
	}
	// Every step's Add applied and nobody steps again: the first live
	// worker turns the table's representation back into w at time total.
	// (A Get at the last clock was the barrier here, which a clock that
	// counts more than the steps lets through early.)
	if err := info.Barrier(); err != nil {
		return err
	}
	if i, _ := info.Share(); i != 0 {
		return nil
	}
	return s.finish(keys, float64(total))
}

// stream cuts a worker's share of an input into batches of exactly n
// records, starting another pass whenever one ends.
type stream struct {
	in    tasks.Input
	pass  datastore.Pass
	cur   *datastore.Records
	i     int
	empty int // passes in a row that yielded nothing
	// all, when set, is the worker's whole share (load): next cycles
	// over it.
	all *datastore.Records
}

func (s *stream) close() {
	if s.pass != nil {
		s.pass.Close()
		s.pass = nil
	}
}

// load reads the worker's share of the input, one pass, into memory:
// next cycles over it from then on, without another pass. A worker whose
// pass held no record (more workers than blocks, or the others took them
// all) reads the next pass, which it has to itself while the others wait
// for it at the Barrier after load: it takes the whole input.
func (s *stream) load(ctx context.Context) error {
	all := &datastore.Records{}
	for all.Len() == 0 {
		for {
			if err := s.advance(ctx); err != nil {
				return err
			}
			if s.cur == nil { // the pass ended
				break
			}
			for i := range s.cur.Len() {
				all.Append(s.cur.Row(i))
			}
		}
	}
	s.all, s.i = all, 0
	return nil
}

// next fills b with the next n records.
func (s *stream) next(ctx context.Context, b *datastore.Records, n int) error {
	b.Reset()
	if s.all != nil {
		for b.Len() < n {
			if s.i >= s.all.Len() {
				s.i = 0
			}
			b.Append(s.all.Row(s.i))
			s.i++
		}
		return nil
	}
	for b.Len() < n {
		if s.cur == nil || s.i >= s.cur.Len() {
			if err := s.advance(ctx); err != nil {
				return err
			}
			continue
		}
		label, keys, vals := s.cur.Row(s.i)
		b.Append(label, keys, vals)
		s.i++
	}
	return nil
}

func (s *stream) advance(ctx context.Context) error {
	if s.pass == nil {
		p, err := s.in.Pass(ctx)
		if err != nil {
			return err
		}
		s.pass = p
	}
	r, err := s.pass.Next(ctx)
	if errors.Is(err, io.EOF) {
		s.close()
		if s.empty++; s.empty > maxEmptyPasses {
			return fmt.Errorf("svrg: %d passes in a row over the input gave this worker no record", s.empty)
		}
		s.cur = nil
		return nil
	}
	if err != nil {
		return err
	}
	if r.Len() > 0 {
		s.empty = 0
	}
	s.cur, s.i = r, 0
	return nil
}

// maxEmptyPasses bounds how often a worker starts a pass that others have
// already read to the end (each pass is a fresh epoch of the FileAssigner,
// so this only trips on an empty input).
const maxEmptyPasses = 100

// step holds a worker's buffers for svrg.sgd's mini-batch steps.
//
// Between two of its batches a key still moves at every step of the
// stage: w <- w - lr d (l2 (w - w~) + mu), an affine map with factor
// a = 1 - lr d l2 and fixed point w* = w~ - mu/l2 (no fixed point, a
// drift of -lr d mu per step, when l2 = 0). Rather than a dense Add per
// step the table holds v = alpha_t w + beta_t, the image of w under that
// map's inverse t times: v = w* + a^-t (w - w*), or v = w + lr d mu t
// when l2 = 0. A batch at step t reads v for its keys, recovers w, and
// adds alpha_{t+1} times its sparse data part; every key is thus exactly
// where the dense recursion puts it (exact for one worker; W workers in
// lockstep assume step t = s W + rank for a worker's s-th step). At the
// end the table is turned back into w. a^-t stays below maxGrowth by
// capping d (any positive d keeps SVRG's fixed point).
//
// Centered features (cent, see lr.Scaler.Center) make the preconditioner
// T T' with T the map from centered standardized coordinates (w', b') to
// raw ones (w = w' inv, b = b' - C.w'): with G the variance-reduced
// gradient and e_k = C_k inv_k, a step moves a centered key by
// -lr (d_k G_k - e_k G_b) and the intercept by
// -lr ((1 + |C|^2) G_b - sum e_k G_k), which is plain SVRG on the centered
// standardized features, written in raw space. Centered keys join every
// batch and are stepped explicitly (their table value is w itself); the
// intercept's constant part drifts lazily as before.
type step struct {
	w         tasks.Table
	snap, mu  []float64 // dense, constant during the stage
	lr, l2    float64
	d         []float64 // per-key step factor (preconditioner)
	drift     []float64 // d_k mu_k: w's lazy drift per step without l2 (0 for centered keys)
	cent      *lr.Centered
	e         []float64   // e_k = C_k inv_k of the centered keys
	explicit  []bool      // centered: stepped at every step, the table holds w
	bdrift    float64     // the intercept's lazy drift per step: (1 + |C|^2) muB
	loga      []float64   // log a_k, when l2 > 0
	wstar     []float64   // w*_k, when l2 > 0
	b, bstate tasks.Table // intercept tables, nil without
	snapB     float64     // b~
	fixedB    float64     // without intercept tables: the intercept, fixed (fixedBias)
	muB       float64     // the intercept's full gradient at the snapshot
	stamp     []uint32    // stamp[k] == cur: k is in the batch at pos[k]
	pos       []int32
	cur       uint32
	keys      []uint64
	wv, delta []float64
	// finite is false once a step's update was not finite (and so not
	// sent): the caller stops the stage.
	finite bool
	// labels is where the records had their first 0 and -1 labels.
	labels lr.Negatives
}

// maxGrowth bounds a^-t over a stage, so v keeps w's precision.
const maxGrowth = 1e12

// setDense computes d (1/scale^2 with inv, else 1), capped so that the
// stage's total steps shrink by at most 1/maxGrowth, and the affine map's
// constants.
func (s *step) setDense(inv []float64, total int64) {
	dim := len(s.mu)
	s.d = make([]float64, dim)
	for k := range s.d {
		s.d[k] = 1
		if inv != nil {
			s.d[k] = inv[k] * inv[k]
		}
	}
	s.explicit = make([]bool, dim)
	s.bdrift = s.muB
	if s.cent != nil {
		s.e = make([]float64, len(s.cent.Keys))
		for j, k := range s.cent.Keys {
			s.explicit[k] = true
			s.e[j] = s.cent.C[j] * s.cent.Inv[j]
		}
		s.bdrift = (1 + s.cent.NormC) * s.muB
	}
	s.drift = make([]float64, dim)
	for k := range s.drift {
		if !s.explicit[k] {
			s.drift[k] = s.d[k] * s.mu[k]
		}
	}
	defer func() {
		for k, ex := range s.explicit {
			if ex && s.loga != nil {
				s.loga[k] = 0 // the table holds w: weight and alpha are identities
			}
		}
	}()
	if !(s.l2 > 0) {
		return
	}
	// lr d l2 <= cmax: (1 - cmax)^-total = maxGrowth. A capped key's
	// regularization part converges within the stage anyway.
	cmax := -math.Expm1(-math.Log(maxGrowth) / float64(max(total, 1)))
	s.loga, s.wstar = make([]float64, dim), make([]float64, dim)
	for k := range s.d {
		c := s.lr * s.d[k] * s.l2
		if c > cmax && !s.explicit[k] { // an explicit key does not grow; capping it would skew T T'
			c, s.d[k] = cmax, cmax/(s.lr*s.l2)
		}
		s.loga[k] = math.Log1p(-c)
		s.wstar[k] = s.snap[k] - s.mu[k]/s.l2
	}
}

// weight recovers w_k at step t from the table's v.
func (s *step) weight(k uint64, v, t float64) float64 {
	if s.loga == nil {
		return v - s.lr*t*s.drift[k]
	}
	// w*_k + a^t (v - w*_k), without subtracting w*_k: w*_k = snap_k -
	// mu_k/l2 can be many orders of magnitude beyond w_k (raw features in
	// the billions: 1e10 against weights of 1e-6), and the difference lost
	// every digit of w (the inner stages then climbed, objective 0.69 to
	// 170 over 8 rounds, a model of accuracy 0.82 written, exit 0).
	// (1 - a^t) w*_k, by expm1, is of w's own size.
	tl := t * s.loga[k]
	return math.Exp(tl)*v - math.Expm1(tl)*s.wstar[k]
}

// alpha is v's factor on w at step t.
func (s *step) alpha(k uint64, t float64) float64 {
	if s.loga == nil {
		return 1
	}
	return math.Exp(-t * s.loga[k])
}

// finish turns the whole table (and the intercept) from v at step total
// back into w. Only one worker calls it, after every step's Add.
func (s *step) finish(keys []uint64, total float64) error {
	v := make([]float64, len(keys))
	if err := s.w.Get(keys, v); err != nil {
		return err
	}
	for i, k := range keys {
		v[i] = s.weight(k, v[i], total) - v[i]
	}
	if !finite(sum(v)) {
		return fmt.Errorf("svrg.sgd: the model became non-finite at the end of the stage: the learning rate (lr = %g) is likely too large", s.lr)
	}
	if s.b != nil {
		if err := s.b.Add(biasKey, []float64{-s.lr * total * s.bdrift}); err != nil {
			return err
		}
	}
	return s.w.Add(keys, v)
}

func sum(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t
}

// run does one step on records lo..hi, assuming t steps (of all workers)
// came before it. Loss and accuracy use the weights before the step.
func (s *step) run(r *datastore.Records, lo, hi int, t float64) (lr.Stats, error) {
	s.finite = true
	s.cur++
	if s.cur == 0 {
		clear(s.stamp)
		s.cur = 1
	}
	dim := uint64(len(s.stamp))
	s.keys = s.keys[:0]
	var batchKeys []uint64
	if hi > lo {
		batchKeys = r.Keys[r.Offsets[lo]:r.Offsets[hi]]
	}
	for _, k := range batchKeys {
		if k >= dim {
			return lr.Stats{}, lr.KeyOutside(r, lo, hi, kvstore.TableSpec{Name: TableW, Size: dim})
		}
		if s.stamp[k] != s.cur {
			s.stamp[k] = s.cur
			s.keys = append(s.keys, k)
		}
	}
	if s.cent != nil {
		for _, k := range s.cent.Keys {
			if s.stamp[k] != s.cur {
				s.stamp[k] = s.cur
				s.keys = append(s.keys, k)
			}
		}
	}
	slices.Sort(s.keys)
	for i, k := range s.keys {
		s.pos[k] = int32(i)
	}
	n := len(s.keys)
	s.wv, s.delta = grow(s.wv, n), grow(s.delta, n)
	if err := s.w.Get(s.keys, s.wv); err != nil {
		return lr.Stats{}, err
	}
	for i, k := range s.keys {
		s.wv[i] = s.weight(k, s.wv[i], t)
	}
	b := s.fixedB
	if s.b != nil {
		var u [1]float64
		if err := s.b.Get(biasKey, u[:]); err != nil {
			return lr.Stats{}, err
		}
		b = u[0] - s.lr*t*s.bdrift
	}
	clear(s.delta)
	gb := 0.0
	var st lr.Stats
	for i := lo; i < hi; i++ {
		a, e := r.Offsets[i], r.Offsets[i+1]
		ks, vs := r.Keys[a:e], r.Vals[a:e]
		z, zs := b, s.snapB
		for j, k := range ks {
			z += s.wv[s.pos[k]] * vs[j]
			zs += s.snap[k] * vs[j]
		}
		y, err := label(r.Labels[i])
		if err == nil {
			err = s.labels.Check(r, i)
		}
		if err != nil {
			return st, fmt.Errorf("%s: %w", r.Where(i), err)
		}
		st.N++
		st.LossSum += lr.LogLoss(z, y)
		if (z > 0) == (y == 1) {
			st.Correct++
		}
		g := lr.Sigmoid(z) - lr.Sigmoid(zs)
		gb += g
		for j, k := range ks {
			s.delta[s.pos[k]] += g * vs[j]
		}
	}
	// The data part of the step, in v's units at step t+1. A step without
	// records (a worker whose share is empty, see SGD) has none: it moves
	// by the full gradient's part only.
	mean := 0.0 // 1/(records in the step)
	if hi > lo {
		mean = 1 / float64(hi-lo)
	}
	scale := -s.lr * mean
	db := scale * gb
	if s.cent != nil {
		// Centered keys: the whole variance-reduced gradient, explicitly.
		gB := gb*mean + s.muB
		db *= 1 + s.cent.NormC
		for j, k := range s.cent.Keys {
			p := s.pos[k]
			g := s.delta[p]*mean + s.l2*(s.wv[p]-s.snap[k]) + s.mu[k]
			db += s.lr * s.e[j] * g
			s.delta[p] = -s.lr * (s.d[k]*g - s.e[j]*gB)
		}
	}
	check := db
	for i, k := range s.keys {
		if !s.explicit[k] {
			s.delta[i] *= scale * s.d[k] * s.alpha(k, t+1)
		}
		check += s.delta[i]
	}
	if !finite(check) || !finite(st.LossSum) {
		s.finite = false
		return st, nil
	}
	if s.b != nil {
		if err := s.b.Add(biasKey, []float64{db}); err != nil {
			return st, err
		}
	}
	return st, s.w.Add(s.keys, s.delta)
}

var biasKey = []uint64{0}

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}
