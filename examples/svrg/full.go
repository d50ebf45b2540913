package svrg

import (
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/examples/lr"
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

	// Clock 0: rank 0 resets snap := w, mu := 0, n := 0 (and the
	// intercept's b~ := b, mu_b := 0, marker := 1).
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
		if bt != nil {
			if err := bt.Get(key0, one); err != nil {
				return err
			}
			if err := bstate.Get(bkeys, bs); err != nil {
				return err
			}
			bs[keySnapBias] = one[0] - bs[keySnapBias]
			bs[keyMuBias] = -bs[keyMuBias]
			bs[keyMarker] = 1 - bs[keyMarker]
			if err := bstate.Add(bkeys, bs); err != nil {
				return err
			}
		}
		// On every replica before the Clock lets the others read: the
		// unacknowledged Adds of a worker that dies are sent again by no
		// one (a backup taking over could miss the reset).
		if err := snap.Flush(); err != nil {
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
	b := 0.0
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
		if err := mu.Add(keys, grad); err != nil {
			return err
		}
		if err := nt.Add(key0, []float64{pending}); err != nil {
			return err
		}
		if bt != nil {
			if err := bstate.Add(bkeys[keyMuBias:keyMuBias+1], []float64{gradB}); err != nil {
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
		return mu.Flush()
	}
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
	// The first live worker as of the Barrier: rank 0 while it lives. When
	// its slave died in the pass, a survivor makes mu the mean gradient;
	// before, nobody did, and the next svrg.sgd stage stepped along the
	// gradient sum (n times too long) with no l2 term.
	if idx, _ := info.Share(); idx == 0 {
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
		if bt != nil { // the intercept is not regularized
			k := bkeys[keyMuBias : keyMuBias+1]
			if err := bstate.Get(k, one); err != nil {
				return err
			}
			one[0] *= 1/n - 1
			if err := bstate.Add(k, one); err != nil {
				return err
			}
		}
		// mu is final on every replica before this worker's stage ends
		// (see the reset's Flush above).
		if err := mu.Flush(); err != nil {
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
