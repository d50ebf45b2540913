package svrg

import (
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/examples/lr"
	"github.com/flexps/flexps/internal/tableops"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// fullL2 checks svrg.full's params and returns its l2.
func fullL2(p tasks.Params) (float64, error) {
	if err := p.Known("l2", "intercept", "standardize", "train"); err != nil {
		return 0, fmt.Errorf("svrg.full: %w", err)
	}
	if err := p.Check("l2"); err != nil {
		return 0, err
	}
	l2 := p.Float("l2", 0)
	if l2 < 0 {
		return 0, fmt.Errorf("svrg: l2 must be >= 0, got %v", l2)
	}
	return l2, nil
}

// Full is the svrg.full stage function (see the package doc).
func Full(info *tasks.Info) error {
	if err := info.RequireBSP("svrg.full"); err != nil {
		return err
	}
	p := info.Params
	l2, err := fullL2(p)
	if err != nil {
		return err
	}
	w, snap, mu, nt, err := tables(info)
	if err != nil {
		return err
	}
	opts, err := modelOptsFrom(p, w)
	if err != nil {
		return err
	}
	trainName := p.String("train", "train")
	train, err := info.Input(trainName)
	if err != nil {
		return err
	}
	if err := tasks.CheckFormat(train, trainName, "svrg.full", "libsvm", "csv"); err != nil {
		return err
	}
	var bt, bstate tasks.Table
	if opts.Intercept {
		if bt, bstate, err = biasTables(info); err != nil {
			return err
		}
	}
	if opts.Standardize {
		// Gathered here, by the wide stage, once per task; svrg.sgd
		// reuses the statistics. This stage's own arithmetic is raw.
		st, err := info.Table(lr.ScaleTable(TableW))
		if err != nil {
			return fmt.Errorf("svrg: standardize: %w (or set standardize = false)", err)
		}
		if _, err := lr.PrepareScale(info, st, w.Spec().Size, train); err != nil {
			return err
		}
	}
	dim := w.Spec().Size
	keys := allKeys(dim)
	key0 := keys[:1]
	one := make([]float64, 1)
	wv := make([]float64, dim)
	buf := make([]float64, dim)
	bkeys := allKeys(biasStateSize)
	bs := make([]float64, biasStateSize)

	sum, ctl, err := fullTables(info, dim)
	if err != nil {
		return err
	}
	// The stage's two steps that one worker does for all (the reset
	// before the pass, the mean after it) run once per stage: the first
	// live worker does each and marks it done in ctl once its writes are
	// on every replica; if its slave dies before the mark, the next one
	// does it again (every write sets a value from what the tables hold,
	// so what the dead one wrote does not count twice). Before, rank 0
	// and then the first live worker did them unmarked: a death half-way
	// left mu half reset or half made the mean, and the next svrg.sgd
	// stepped along it. The marks count the stage's runs: every worker
	// reads them before the Barrier after which the first one writes.
	ctlv := make([]float64, ctlSize)
	if err := ctl.Get(allKeys(ctlSize), ctlv); err != nil {
		return err
	}
	run := ctlv[keyResets] + 1
	if err := info.Barrier(); err != nil {
		return err
	}
	fs := &fullState{w: w, snap: snap, sum: sum, mu: mu, n: nt, b: bt, bstate: bstate, keys: keys, wv: wv, buf: buf, one: one, bs: bs}
	if err := once(info, ctl, ctlv, keyResets, run, fs.reset); err != nil {
		return err
	}
	if err := info.Clock(); err != nil {
		return err
	}

	// Clock 1: the reset is done (once waited for its mark).
	if err := w.Get(keys, wv); err != nil {
		return err
	}
	b, err := fixedBias(info, opts)
	if err != nil {
		return err
	}
	if bt != nil {
		if err := bt.Get(key0, one); err != nil {
			return err
		}
		b = one[0]
	}
	grad := buf
	clear(grad)
	gradB := 0.0
	var st lr.Stats
	// In a stage that survives a slave's death, the sums of each block
	// reach the tables once the block is confirmed (else a worker that
	// died took them with it, and the survivors did not re-run the block:
	// mu and n missed its records).
	var pending float64 // records summed since the last add
	addSums := func() error {
		check := gradB
		for _, g := range grad {
			check += g
		}
		if !finite(st.LossSum) || !finite(check) {
			return fmt.Errorf("svrg.full: stage %q: the training loss or its gradient at the current model is not finite (loss sum %v): the model diverged; the svrg.sgd learning rate (lr) is likely too large", info.StageName, st.LossSum)
		}
		if err := sum.Add(keys, grad); err != nil {
			return err
		}
		if err := nt.Add(key0, []float64{pending}); err != nil {
			return err
		}
		if bt != nil {
			if err := bstate.Add(bkeys[keySumBias:keySumBias+1], []float64{gradB}); err != nil {
				return err
			}
		}
		clear(grad)
		gradB, pending = 0, 0
		return nil
	}
	commit := func() error {
		if err := addSums(); err != nil {
			return err
		}
		return sum.Flush()
	}
	var seen lr.Negatives // the first 0 and -1 labels
	err = tasks.EachRecordsCommit(info.Ctx, train, func(r *datastore.Records) error {
		var rs lr.Stats
		for i := 0; i < r.Len(); i++ {
			a, e := r.Offsets[i], r.Offsets[i+1]
			ks, vs := r.Keys[a:e], r.Vals[a:e]
			z := b
			for j, k := range ks {
				if k >= dim {
					return lr.KeyOutside(r, i, i+1, kvstore.TableSpec{Name: TableW, Size: dim})
				}
				z += wv[k] * vs[j]
			}
			y, err := label(r.Labels[i])
			if err == nil {
				err = seen.Check(r, i)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", r.Where(i), err)
			}
			rs.N++
			loss, g := lr.LossGrad(z, y)
			rs.LossSum += loss
			if (z > 0) == (y == 1) {
				rs.Correct++
			}
			gradB += g
			for j, k := range ks {
				grad[k] += g * vs[j]
			}
		}
		st.Add(rs)
		pending += float64(rs.N)
		info.Report(rs.N, rs.LossSum)
		return nil
	}, commit)
	if err != nil {
		return err
	}
	if err := addSums(); err != nil {
		return err
	}
	// A Barrier, not a Clock: in a stage that survives a slave's death a
	// worker starved at the pass's end ticks idle clocks (so that workers
	// still reading are not held back by it), so a worker's clock count
	// says nothing about where it is in this function; after the Barrier
	// every worker's Adds are applied.
	if err := info.Barrier(); err != nil {
		return err
	}

	// Every worker's Adds of the pass are visible.
	if err := nt.Get(key0, one); err != nil {
		return err
	}
	n := one[0]
	if n < 1 {
		return fmt.Errorf("svrg: input %q has no records", trainName)
	}
	if st.N > 0 && st.LossSum/float64(st.N) > divergedLoss {
		return fmt.Errorf("svrg.full: stage %q: mean training loss %.3g at the current model: training diverged; the svrg.sgd learning rate (lr) is likely too large", info.StageName, st.LossSum/float64(st.N))
	}
	obj := st.LossSum / n
	if idx, _ := info.Share(); idx == 0 {
		sq := 0.0
		for _, v := range wv {
			sq += v * v
		}
		obj += l2 / 2 * sq
	}
	if err := once(info, ctl, ctlv, keyMeans, run, func() error { return fs.mean(n, l2) }); err != nil {
		return err
	}
	info.ReportEpoch(1, map[string]float64{tasks.MetricObjective: obj, tasks.MetricSamples: float64(st.N), tasks.MetricLossSum: st.LossSum, tasks.MetricCorrect: float64(st.Correct)})
	return nil
}

// fullState is what svrg.full's two one-worker steps read and write.
// Each write adds the difference between the value it sets and the value
// it read (or clears first), so a step done again after a death half-way
// ends as one whole.
type fullState struct {
	w, snap, sum, mu, n getAdder
	b, bstate           getAdder // nil without an intercept
	keys                []uint64 // 0..dim-1
	wv, buf             []float64
	one, bs             []float64
}

// getAdder is the part of a table fullState uses.
type getAdder = tableops.GetAdder

// reset sets snap := w, sum := 0, n := 0 (and the intercept's b~ := b,
// its sum := 0, marker := 1), reading w into wv.
func (f *fullState) reset() error {
	keys, key0, wv, buf := f.keys, f.keys[:1], f.wv, f.buf
	if err := f.w.Get(keys, wv); err != nil {
		return err
	}
	if err := f.snap.Get(keys, buf); err != nil {
		return err
	}
	for i := range buf {
		buf[i] = wv[i] - buf[i]
	}
	if err := f.snap.Add(keys, buf); err != nil {
		return err
	}
	if err := tableops.Negate(f.sum, keys, buf); err != nil {
		return err
	}
	if err := tableops.Negate(f.n, key0, f.one); err != nil {
		return err
	}
	if f.b == nil {
		return nil
	}
	if err := f.b.Get(key0, f.one); err != nil {
		return err
	}
	bkeys, bs := allKeys(biasStateSize), f.bs
	if err := f.bstate.Get(bkeys, bs); err != nil {
		return err
	}
	bs[keySnapBias] = f.one[0] - bs[keySnapBias]
	bs[keySumBias] = -bs[keySumBias]
	bs[keyMarker] = 1 - bs[keyMarker]
	bs[keyMuBias] = 0
	return f.bstate.Add(bkeys, bs)
}

// mean sets mu := sum/n + l2 w~ (wv: w~) and the intercept's mu_b :=
// sum_b/n (it is not regularized). Each is cleared first (x + -x is
// exactly 0), so mu ends the same whatever it held.
func (f *fullState) mean(n, l2 float64) error {
	keys, buf := f.keys, f.buf
	if err := tableops.Negate(f.mu, keys, buf); err != nil {
		return err
	}
	if err := f.sum.Get(keys, buf); err != nil {
		return err
	}
	for i := range buf {
		buf[i] = buf[i]/n + l2*f.wv[i]
	}
	if err := f.mu.Add(keys, buf); err != nil {
		return err
	}
	if f.b == nil {
		return nil
	}
	k := allKeys(biasStateSize)[keyMuBias : keyMuBias+1]
	if err := tableops.Negate(f.bstate, k, f.one); err != nil {
		return err
	}
	if err := f.bstate.Get(allKeys(biasStateSize), f.bs); err != nil {
		return err
	}
	return f.bstate.Add(k, []float64{f.bs[keySumBias] / n})
}

// once runs do on the first live worker until key of ctl (ctlv: its
// values as last read) holds want: do, its writes on every replica, then
// the mark; a Barrier, after which every worker reads the marks. A first
// live worker that died before its mark leaves the next one to run do
// again, which must therefore set values from what the tables hold.
func once(info *tasks.Info, ctl tasks.Table, ctlv []float64, key int, want float64, do func() error) error {
	for ctlv[key] != want {
		if idx, _ := info.Share(); idx == 0 {
			if err := do(); err != nil {
				return err
			}
			if err := ctl.Flush(); err != nil { // every table's Adds
				return err
			}
			if err := ctl.Add(allKeys(ctlSize)[key:key+1], []float64{want - ctlv[key]}); err != nil {
				return err
			}
			if err := ctl.Flush(); err != nil {
				return err
			}
		}
		if err := info.Barrier(); err != nil {
			return err
		}
		if err := ctl.Get(allKeys(ctlSize), ctlv); err != nil {
			return err
		}
	}
	return nil
}

// fullTables opens svrg.full's own tables: the gradient sum and the marks.
func fullTables(info *tasks.Info, dim uint64) (sum, ctl tasks.Table, err error) {
	if sum, err = info.Table(TableSum); err != nil {
		return nil, nil, fmt.Errorf("svrg: %w (the task adds it when svrg.full is registered)", err)
	}
	if ctl, err = info.Table(TableCtl); err != nil {
		return nil, nil, fmt.Errorf("svrg: %w (the task adds it when svrg.full is registered)", err)
	}
	if sum.Spec().Size < dim || sum.Spec().Width != 1 || ctl.Spec().Size < ctlSize || ctl.Spec().Width != 1 {
		return nil, nil, fmt.Errorf("svrg: tables %q (%d x %d) and %q (%d x %d) want %d x 1 and %d x 1",
			TableSum, sum.Spec().Size, sum.Spec().Width, TableCtl, ctl.Spec().Size, ctl.Spec().Width, dim, ctlSize)
	}
	return sum, ctl, nil
}
