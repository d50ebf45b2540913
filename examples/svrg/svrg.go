// Package svrg is binary logistic regression (the loss of examples/lr,
// labels > 0 positive, plus l2/2 ||w||^2) trained by SVRG as two
// alternating stages per round, the FlexPS example: a full-gradient stage
// on many ps workers and a stochastic stage on few local workers.
//
// Tables (fixed names, width 1): "w" the model, "snap" the snapshot w~,
// "mu" the full gradient at w~ (mu = (1/n) sum_i grad loss_i(w~) + l2 w~)
// and "n" (size >= 1) the number of training samples.
//
// svrg.full (ps, BSP, any number of workers) runs three iterations. Clock
// 0: rank 0 alone reads all of snap, mu and n and adds (w - snap), -mu and
// -n, so the three hold w, 0 and 0 once those Adds land; no other worker
// touches a table at clock 0. Clock 1: every worker first reads all of w
// (the snapshot: nobody writes w in this stage). Under BSP that Get waits
// until every worker has finished clock 0, so it is a barrier: rank 0's
// reads happened before it clocked, hence before any worker sends its
// gradient. Adds commute, so it does not matter when rank 0's negations
// are applied, only that the values they cancel were read before anything
// new was added. Each worker then streams its share of the data, sums the
// loss gradient locally (one dense array) and adds that sum to mu and its
// record count to n. Clock 2: a Get at clock 2 sees every Add of clocks
// <= 1, so every worker reads the true n and reports its partial objective
// lossSum/n (rank 0 adds l2/2 ||w||^2): the master sums the workers'
// metrics, so "objective" sums to F(w~). Rank 0 also reads all of mu (the
// gradient sum) and adds sum*(1/n - 1) + l2 w~, so mu ends as the full
// gradient. n is recounted every round (the pass reads every record
// anyway), which keeps each round self-contained. All of this needs BSP
// (the stage function cannot check it: Info does not carry the stage's
// consistency): under SSP or ASP those Gets are no barriers.
//
// svrg.sgd (local or single, few workers; any kind works) reads snap, mu
// and n once (they do not change during the stage) and runs mini-batch
// steps w -= lr (grad_B(w) - grad_B(w~) + mu), one Get and one Add of the
// batch's keys per step and a Clock after each. Every worker takes the
// same number of steps, ceil(n / (workers * batch)) per inner epoch, from
// its share of the input (starting another pass when its share runs out,
// stopping mid-pass when its quota is reached), so W workers stay in BSP
// lockstep and the stage trains on epochs_inner x n samples; with uneven
// shares a record may be seen twice or not at all in an inner epoch, as
// in SVRG's sampling. The mu term touches every coordinate at every step;
// rather than a dense Add per step the stage keeps w in the table shifted
// by that deterministic drift: after t steps (of all workers) the table
// holds u = w + lr t mu, a batch reads w = u - lr t mu for its keys and
// adds only its sparse part to u. A worker's s-th step assumes t = s W +
// rank, the order of a lockstep round, exact for one worker. After its
// last step a worker reads one key: at its final clock that Get waits for
// every worker's last step (BSP), so nobody reads w after the next line
// changes it; then it adds -lr (its steps) mu to every key, and the sum
// of the workers' shares leaves w. Several sgd workers therefore need BSP
// (under SSP/ASP the final Get is no barrier). The l2 part of
// grad_B(w) - grad_B(w~) is l2 (w - w~); like lr.sgd it is applied to the
// batch's keys only. It vanishes at w = w~, so SVRG's fixed point
// (mu = grad F(w~) = 0) is unchanged.
//
// Stage functions registered here:
//
//	svrg.full  params: l2 (0), train ("train")
//	svrg.sgd   params: epochs_inner (1), batch (100), lr (0.5), l2 (0), train ("train")
//
// Task builds rounds x [full, sgd] in Go; configs/svrg.toml does the same
// with `repeat`. The model kind is "lr" (table "w"), so `flexps eval`
// scores it.
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
	"github.com/flexps/flexps/tasks"
)

func init() {
	tasks.Register("svrg.full", Full)
	tasks.Register("svrg.sgd", SGD)
}

// Table names.
const (
	TableW    = "w"
	TableSnap = "snap"
	TableMu   = "mu"
	TableN    = "n"
)

// tables opens w, snap, mu and n and checks their shapes.
func tables(info *tasks.Info) (w, snap, mu, n tasks.Table, err error) {
	open := func(name string) (tasks.Table, error) {
		t, err := info.Table(name)
		if err != nil {
			return nil, fmt.Errorf("svrg: %w", err)
		}
		if t.Spec().Width != 1 {
			return nil, fmt.Errorf("svrg: table %q: width must be 1, got %d", name, t.Spec().Width)
		}
		return t, nil
	}
	if w, err = open(TableW); err != nil {
		return
	}
	if snap, err = open(TableSnap); err != nil {
		return
	}
	if mu, err = open(TableMu); err != nil {
		return
	}
	if n, err = open(TableN); err != nil {
		return
	}
	size := w.Spec().Size
	if snap.Spec().Size != size || mu.Spec().Size != size {
		err = fmt.Errorf("svrg: tables %q, %q and %q must have the same size, got %d, %d, %d",
			TableW, TableSnap, TableMu, size, snap.Spec().Size, mu.Spec().Size)
	}
	return
}

// allKeys returns 0..size-1.
func allKeys(size uint64) []uint64 {
	keys := make([]uint64, size)
	for i := range keys {
		keys[i] = uint64(i)
	}
	return keys
}

func label(y float64) float64 {
	if y > 0 {
		return 1
	}
	return 0
}

// Full is the svrg.full stage function (see the package doc).
func Full(info *tasks.Info) error {
	if err := info.RequireBSP("svrg.full"); err != nil {
		return err
	}
	p := info.Params
	if err := p.Check("l2"); err != nil {
		return err
	}
	l2 := p.Float("l2", 0)
	if l2 < 0 {
		return fmt.Errorf("svrg: l2 must be >= 0, got %v", l2)
	}
	w, snap, mu, nt, err := tables(info)
	if err != nil {
		return err
	}
	train, err := info.Input(p.String("train", "train"))
	if err != nil {
		return err
	}
	dim := w.Spec().Size
	keys := allKeys(dim)
	key0 := keys[:1]
	one := make([]float64, 1)
	wv := make([]float64, dim)
	buf := make([]float64, dim)

	// Clock 0: rank 0 resets snap := w, mu := 0, n := 0.
	if info.Rank == 0 {
		if err := w.Get(keys, wv); err != nil {
			return err
		}
		if err := snap.Get(keys, buf); err != nil {
			return err
		}
		for i := range buf {
			buf[i] = wv[i] - buf[i]
		}
		if err := snap.Add(keys, buf); err != nil {
			return err
		}
		if err := negate(mu, keys, buf); err != nil {
			return err
		}
		if err := negate(nt, key0, one); err != nil {
			return err
		}
	}
	if err := info.Clock(); err != nil {
		return err
	}

	// Clock 1: this Get is the barrier after rank 0's reads.
	if err := w.Get(keys, wv); err != nil {
		return err
	}
	grad := buf
	clear(grad)
	var st lr.Stats
	err = tasks.EachRecords(info.Ctx, train, func(r *datastore.Records) error {
		var bs lr.Stats
		for i := 0; i < r.Len(); i++ {
			a, b := r.Offsets[i], r.Offsets[i+1]
			ks, vs := r.Keys[a:b], r.Vals[a:b]
			z := 0.0
			for j, k := range ks {
				if k >= dim {
					return fmt.Errorf("svrg: feature id %d out of range: table %q has %d keys", k, TableW, dim)
				}
				z += wv[k] * vs[j]
			}
			y := label(r.Labels[i])
			bs.N++
			bs.LossSum += lr.LogLoss(z, y)
			if (z > 0) == (y == 1) {
				bs.Correct++
			}
			g := lr.Sigmoid(z) - y
			for j, k := range ks {
				grad[k] += g * vs[j]
			}
		}
		st.Add(bs)
		info.Report(bs.N, bs.LossSum)
		return nil
	})
	if err != nil {
		return err
	}
	if err := mu.Add(keys, grad); err != nil {
		return err
	}
	one[0] = float64(st.N)
	if err := nt.Add(key0, one); err != nil {
		return err
	}
	if err := info.Clock(); err != nil {
		return err
	}

	// Clock 2: every worker's Adds of clock 1 are visible.
	if err := nt.Get(key0, one); err != nil {
		return err
	}
	n := one[0]
	if n < 1 {
		return fmt.Errorf("svrg: input %q has no records", p.String("train", "train"))
	}
	obj := st.LossSum / n
	if info.Rank == 0 {
		sq := 0.0
		for _, v := range wv {
			sq += v * v
		}
		obj += l2 / 2 * sq
		// mu holds the gradient sum: make it the mean plus l2 w~.
		if err := mu.Get(keys, buf); err != nil {
			return err
		}
		for i := range buf {
			buf[i] = buf[i]*(1/n-1) + l2*wv[i]
		}
		if err := mu.Add(keys, buf); err != nil {
			return err
		}
	}
	info.ReportEpoch(1, map[string]float64{tasks.MetricObjective: obj, tasks.MetricSamples: float64(st.N), tasks.MetricLossSum: st.LossSum, tasks.MetricCorrect: float64(st.Correct)})
	return nil
}

// negate adds -t[keys] to t, using buf (len(keys)) as scratch.
func negate(t tasks.Table, keys []uint64, buf []float64) error {
	if err := t.Get(keys, buf); err != nil {
		return err
	}
	for i := range buf {
		buf[i] = -buf[i]
	}
	return t.Add(keys, buf)
}

// SGDConfig is svrg.sgd's parameters.
type SGDConfig struct {
	EpochsInner int
	Batch       int
	LR          float64
	L2          float64
	Train       string
}

// SGDConfigFrom reads and checks the stage parameters.
func SGDConfigFrom(p tasks.Params) (SGDConfig, error) {
	if err := p.Check("epochs_inner", "batch", "lr", "l2"); err != nil {
		return SGDConfig{}, err
	}
	c := SGDConfig{EpochsInner: p.Int("epochs_inner", 1), Batch: p.Int("batch", 100), LR: p.Float("lr", 0.5),
		L2: p.Float("l2", 0), Train: p.String("train", "train")}
	switch {
	case c.EpochsInner < 1:
		return c, fmt.Errorf("svrg: epochs_inner must be >= 1, got %d", c.EpochsInner)
	case c.Batch < 1:
		return c, fmt.Errorf("svrg: batch must be >= 1, got %d", c.Batch)
	case !(c.LR > 0):
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
	train, err := info.Input(cfg.Train)
	if err != nil {
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
	// Every worker takes the same number of steps so that the workers
	// stay in lockstep and the stage's steps total epochs_inner passes.
	workers := int64(max(info.Workers, 1))
	perEpoch := int64(math.Ceil(one[0] / float64(workers*int64(cfg.Batch))))
	s := &step{w: w, snap: sv, mu: mv, lr: cfg.LR, l2: cfg.L2, stamp: make([]uint32, dim), pos: make([]int32, dim)}
	in := &stream{in: train}
	defer in.close()
	var batch datastore.Records
	steps := int64(0)
	for epoch := info.StartEpoch + 1; epoch <= cfg.EpochsInner; epoch++ {
		var st lr.Stats
		for range perEpoch {
			if err := in.next(info.Ctx, &batch, cfg.Batch); err != nil {
				return err
			}
			bs, err := s.run(&batch, 0, batch.Len(), float64(steps*workers+int64(info.Rank)))
			if err != nil {
				return err
			}
			steps++
			st.Add(bs)
			info.Report(bs.N, bs.LossSum)
			if err := info.Clock(); err != nil {
				return err
			}
		}
		info.ReportEpoch(epoch, map[string]float64{tasks.MetricSamples: float64(st.N), tasks.MetricLossSum: st.LossSum, tasks.MetricCorrect: float64(st.Correct)})
	}
	// Barrier: at clock steps this Get waits until every worker has
	// finished its steps (all at the same clock), so no step reads w after
	// a worker undid its share of the drift below.
	if err := w.Get(keys[:1], one); err != nil {
		return err
	}
	// Undo the drift shift: w = u - lr * steps * mu, this worker's share.
	for i := range mv {
		mv[i] *= -cfg.LR * float64(steps)
	}
	return w.Add(keys, mv)
}

// stream cuts a worker's share of an input into batches of exactly n
// records, starting another pass whenever one ends.
type stream struct {
	in    tasks.Input
	pass  datastore.Pass
	cur   *datastore.Records
	i     int
	empty int // passes in a row that yielded nothing
}

func (s *stream) close() {
	if s.pass != nil {
		s.pass.Close()
		s.pass = nil
	}
}

// next fills b with the next n records.
func (s *stream) next(ctx context.Context, b *datastore.Records, n int) error {
	b.Reset()
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
type step struct {
	w         tasks.Table
	snap, mu  []float64 // dense, constant during the stage
	lr, l2    float64
	stamp     []uint32 // stamp[k] == cur: k is in the batch at pos[k]
	pos       []int32
	cur       uint32
	keys      []uint64
	wv, delta []float64
}

// run does one step on records lo..hi, assuming t steps (of all workers)
// came before it. Loss and accuracy use the weights before the step.
func (s *step) run(r *datastore.Records, lo, hi int, t float64) (lr.Stats, error) {
	s.cur++
	if s.cur == 0 {
		clear(s.stamp)
		s.cur = 1
	}
	dim := uint64(len(s.stamp))
	s.keys = s.keys[:0]
	for _, k := range r.Keys[r.Offsets[lo]:r.Offsets[hi]] {
		if k >= dim {
			return lr.Stats{}, fmt.Errorf("svrg: feature id %d out of range: table %q has %d keys", k, TableW, dim)
		}
		if s.stamp[k] != s.cur {
			s.stamp[k] = s.cur
			s.keys = append(s.keys, k)
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
	shift := s.lr * t
	for i, k := range s.keys {
		s.wv[i] -= shift * s.mu[k] // u -> w
	}
	clear(s.delta)
	var st lr.Stats
	for i := lo; i < hi; i++ {
		a, b := r.Offsets[i], r.Offsets[i+1]
		ks, vs := r.Keys[a:b], r.Vals[a:b]
		z, zs := 0.0, 0.0
		for j, k := range ks {
			z += s.wv[s.pos[k]] * vs[j]
			zs += s.snap[k] * vs[j]
		}
		y := label(r.Labels[i])
		st.N++
		st.LossSum += lr.LogLoss(z, y)
		if (z > 0) == (y == 1) {
			st.Correct++
		}
		g := lr.Sigmoid(z) - lr.Sigmoid(zs)
		for j, k := range ks {
			s.delta[s.pos[k]] += g * vs[j]
		}
	}
	scale := -s.lr / float64(hi-lo)
	for i, k := range s.keys {
		s.delta[i] = scale*s.delta[i] - s.lr*s.l2*(s.wv[i]-s.snap[k])
	}
	return st, s.w.Add(s.keys, s.delta)
}

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}
