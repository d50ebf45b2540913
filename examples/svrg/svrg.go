// Package svrg is binary logistic regression (the loss of examples/lr,
// labels 1 positive and 0 or -1 negative, plus l2/2 ||w||^2, with an
// unregularized intercept b) trained by SVRG as two
// alternating stages per round, the FlexPS example: a full-gradient stage
// on many ps workers and a stochastic stage on few local workers.
//
// Tables (fixed names, width 1): "w" the model, "snap" the snapshot w~,
// "mu" the full gradient at w~ (mu = (1/n) sum_i grad loss_i(w~) + l2 w~)
// and "n" (size >= 1) the number of training samples.
//
// svrg.full (ps, BSP, any number of workers): every worker reads the
// marks of "w.svrg.ctl" (how many runs of the stage reset and made the
// mean), then a Barrier; the first live worker resets: snap := w, the
// gradient sum "w.svrg.sum" := 0, n := 0 (each write adds the difference
// to the value it read), and marks the reset done once those writes are
// on every replica; a Barrier, after which every worker reads the mark,
// and if the resetting worker's slave died before it, the next first
// live worker resets again (the writes set values, so a half reset
// done again ends as one whole). A Clock; then every worker reads all of
// w (the snapshot: nobody writes w in this stage), streams its share of
// the data, sums the loss gradient locally (one dense array) and adds
// that sum to "w.svrg.sum" and its record count to n. Then a Barrier (not
// a Clock: a worker starved at the pass's end in a stage that survives a
// slave's death ticks idle clocks, so clock counts do not line up after a
// pass): every worker's Adds are applied, so every worker reads the true
// n and reports its partial objective lossSum/n (the first live worker
// adds l2/2 ||w||^2): the master sums the workers' metrics, so
// "objective" sums to F(w~). The first live worker then makes mu the
// full gradient, mu := sum/n + l2 w~ (cleared first, so it ends the same
// whatever it held), marked and done again as the reset is. n is
// recounted every round (the pass reads every record anyway), which
// keeps each round self-contained. All of this needs BSP (svrg.full is
// refused at submission under another model with more than one worker).
//
// svrg.sgd (local or single, few workers; any kind works) reads snap, mu
// and n once (they do not change during the stage) and runs mini-batch
// steps w -= lr (grad_B(w) - grad_B(w~) + mu), one Get and one Add of the
// batch's keys per step and a Clock after each. Every worker takes the
// same number of steps, ceil(n / (workers * batch)) per inner epoch, from
// its share of the input (one worker streams it, starting another pass
// when it runs out; several workers read their shares once into memory
// and cycle over them, since a pass started again may tick a starved
// worker's clock without a step), so W workers stay in BSP lockstep and
// the stage trains on epochs_inner x n samples; with uneven
// shares a record may be seen twice or not at all in an inner epoch, as
// in SVRG's sampling. The mu and l2 terms touch every coordinate at
// every step; rather than a dense Add per step, each key follows that
// dense affine recursion lazily: the table holds an affine image of w
// that the untouched steps leave unchanged (u = w + lr t mu without l2;
// with l2 the recursion contracts toward a fixed point, see step), a
// batch reads its keys' u, recovers w exactly, and adds only its sparse
// part in u's units, so every key is where the dense recursion puts it. A
// worker's s-th step assumes t = s W + rank, the order of a lockstep
// round, exact for one worker. After its last step a worker reads one
// key: at its final clock that Get waits for every worker's last step
// (BSP), so nobody steps after; worker 0 then turns the table back into
// w. Several sgd workers therefore need BSP (under SSP/ASP the final Get
// is no barrier).
//
// Real features come in very different magnitudes; like lr.sgd (and Spark
// MLlib), the stages fit an intercept and scale the features by default:
//
//   - intercept: the bias b lives in "w.bias" (the lr model's intercept,
//     so `flexps eval` uses it) and is not regularized. Its snapshot b~,
//     its full-gradient part and a marker that svrg.full ran with an
//     intercept live in "w.bias.svrg" (3 keys). b follows the same drift
//     shift as w.
//   - standardize: per-feature scales from one statistics pass of the
//     stage's workers (lr.PrepareScale, table "w.scale"; the first
//     svrg.full stage gathers them, later stages reuse them). The
//     objective stays the raw-space one above, so the model is the one a
//     reference solver (liblinear -s 0) finds; the scales only
//     precondition the inner steps: key k moves by lr d_k (grad_B(w) -
//     grad_B(w~) + mu)_k with d_k = 1/scale_k^2, which is plain SVRG on
//     the standardized features written back in raw space. The dense
//     features (non-zero in at least half the rows, see lr.Scaler.Center)
//     are also centered, through a non-diagonal preconditioner that moves
//     the intercept with them (see step); without it a dense feature with
//     a large common offset stays nearly collinear with the intercept and
//     SVRG on scikit-learn's raw breast cancer data ended 3-8x above
//     liblinear's objective. Each scale also absorbs the l2 term (see
//     step.withL2). snap and mu stay raw, so svrg.full does not depend on
//     the setting.
//
// Step size and inner length: without an lr param svrg.sgd chooses lr =
// 1/L, L the largest curvature of the preconditioned loss on the
// workers' first 2048 records (power iteration; see autoLR, table
// "w.svrg.step"), measured once per task, divided by W on W > 1 ps workers
// (their steps of a clock start from the same weights); a given lr is
// used as is. The
// inner stage takes epochs_inner passes and at least min_steps (1000)
// steps: on small data a pass is a handful of steps.
//
// Both tables are added to the task automatically (tasks.RegisterTables),
// as are svrg.full's "w.svrg.sum" and "w.svrg.ctl" (see Full).
// A non-finite or exploding objective, gradient or step stops the stage
// with an error naming the stage and the likely cause (svrg.sgd's lr), so
// no broken model is written.
//
// Stage functions registered here:
//
//	svrg.full  params: l2 (0), intercept (true), standardize (true for dense tables), train ("train")
//	svrg.sgd   params: epochs_inner (1), min_steps (1000), batch (100), lr (chosen from the data),
//	           l2 (0), intercept (true), standardize (true for dense tables), train ("train")
//
// l2 and intercept must be the same in both stages (svrg.sgd checks the
// intercept). Task builds rounds x [full, sgd] in Go; configs/svrg.toml
// does the same with `repeat`. The model kind is "lr" (table "w" and its
// intercept "w.bias"), so `flexps eval` scores it.
package svrg

import (
	"fmt"
	"math"

	"github.com/flexps/flexps/examples/lr"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

func init() {
	tasks.Register("svrg.full", Full)
	tasks.Register("svrg.sgd", SGD)
	tasks.RegisterNeedsBSP("svrg.full")
	tasks.RegisterNeedsBSP("svrg.sgd")
	tasks.RegisterTables("svrg.full", StageTables)
	tasks.RegisterTables("svrg.sgd", StageTables)
	tasks.RegisterParams("svrg.sgd", func(p tasks.Params) error { _, err := SGDConfigFrom(p); return err })
	tasks.RegisterParams("svrg.full", func(p tasks.Params) error { _, err := fullL2(p); return err })
	for _, fn := range []string{"svrg.full", "svrg.sgd"} {
		tasks.RegisterInputs(fn, tasks.InputParam{Param: "train", Required: true, Labeled: true})
	}
	tasks.RegisterTaskParams("svrg.sgd", sgdTaskParams)
	tasks.RegisterTaskParams("svrg.full", tableSetup)
}

// sharedParams refuses an svrg.sgd stage whose l2, intercept or
// standardize differ from those of the svrg.full stage before it: the
// inner steps then minimize another objective than the one whose full
// gradient they correct with, and the model ends between the two (breast
// cancer, full l2 1e-4 and inner l2 0.1: test logloss 0.087 against
// 0.055; intercept off in the inner stage only: 0.10), silently.
func sharedParams(t *tasks.MultiStageTask) (int, string, error) {
	dense := true
	for _, spec := range t.Tables {
		if spec.Name == TableW {
			dense = spec.Storage == kvstore.Dense
		}
	}
	full := -1
	for i, s := range t.Stages {
		switch s.Func {
		case "svrg.full":
			full = i
		case "svrg.sgd":
			if full < 0 {
				continue
			}
			f := t.Stages[full].Params
			if a, b := s.Params.String("train", "train"), f.String("train", "train"); a != b {
				return i, "train", fmt.Errorf("svrg.sgd: train = %q, but stage %d (%s), the full stage before it, reads %q: the inner loop must run on the data of the full gradient that corrects it", a, full, t.Stages[full].Name, b)
			}
			if a, b := s.Params.Float("l2", 0), f.Float("l2", 0); a != b {
				return i, "l2", fmt.Errorf("svrg.sgd: l2 = %v, but stage %d (%s), the full stage before it, has l2 = %v: set the same in both", a, full, t.Stages[full].Name, b)
			}
			for _, key := range []string{"intercept", "standardize"} {
				def := key == "intercept" || dense
				if a, b := s.Params.Bool(key, def), f.Bool(key, def); a != b {
					return i, key, fmt.Errorf("svrg.sgd: %s = %v, but stage %d (%s), the full stage before it, has %s = %v: set the same in both", key, a, full, t.Stages[full].Name, key, b)
				}
			}
		}
	}
	return -1, "", nil
}

// Table names.
const (
	TableW    = "w"
	TableSnap = "snap"
	TableMu   = "mu"
	TableN    = "n"
	// TableBiasState holds the intercept's snapshot (key 0), its
	// full-gradient part (key 1), a marker that svrg.full ran with an
	// intercept (key 2) and the sum of its gradient over the pass (key 3).
	TableBiasState = "w.bias.svrg"
	// TableSum holds the sum of svrg.full's gradients over the pass, of
	// which it makes mu the mean; TableCtl counts the stage's resets and
	// means done (see Full).
	TableSum = "w.svrg.sum"
	TableCtl = "w.svrg.ctl"
)

// Keys of TableBiasState.
const (
	keySnapBias = iota
	keyMuBias
	keyMarker
	keySumBias
	biasStateSize
)

// Keys of TableCtl.
const (
	keyResets = iota // svrg.full runs whose reset is complete
	keyMeans         // svrg.full runs whose mean is complete
	ctlSize
)

// StageTables is the stages' tasks.TablesFunc: the intercept and scale tables
// their parameters ask for.
func StageTables(st tasks.Stage, declared []kvstore.TableSpec) []kvstore.TableSpec {
	for _, w := range declared {
		if w.Name != TableW {
			continue
		}
		intercept := st.Params.Bool("intercept", true)
		out := lr.AuxTables(w, intercept, st.Params.Bool("standardize", lr.StandardizeDefault(w)))
		if intercept {
			out = append(out, kvstore.TableSpec{Name: TableBiasState, Size: biasStateSize, Replicas: w.Replicas})
		}
		if st.Func == "svrg.full" {
			out = append(out, kvstore.TableSpec{Name: TableSum, Size: w.Size, Replicas: w.Replicas},
				kvstore.TableSpec{Name: TableCtl, Size: ctlSize, Replicas: w.Replicas})
		}
		if st.Func == "svrg.sgd" {
			if _, ok := st.Params["lr"]; !ok {
				out = append(out, kvstore.TableSpec{Name: TableStep, Size: 2, Replicas: w.Replicas})
			}
		}
		return out
	}
	return nil
}

// modelOpts are the parameters both stages share.
type modelOpts struct {
	Intercept   bool
	Standardize bool
}

func modelOptsFrom(p tasks.Params, w tasks.Table) (modelOpts, error) {
	if err := lr.BoolParams(p, "intercept", "standardize"); err != nil {
		return modelOpts{}, fmt.Errorf("svrg: %w", err)
	}
	o := modelOpts{Intercept: p.Bool("intercept", true), Standardize: p.Bool("standardize", lr.StandardizeDefault(w.Spec()))}
	if o.Standardize && !lr.StandardizeDefault(w.Spec()) {
		return o, fmt.Errorf("svrg: standardize needs a dense table; table %q is %s (set standardize = false)", TableW, w.Spec().Storage)
	}
	return o, nil
}

// fixedBias is lr.FixedBias of w for a stage with intercept = false (0
// with an intercept of its own).
func fixedBias(info *tasks.Info, opts modelOpts) (float64, error) {
	if opts.Intercept {
		return 0, nil
	}
	b, err := lr.FixedBias(info, TableW)
	if err != nil {
		return 0, fmt.Errorf("svrg: %w", err)
	}
	return b, nil
}

// biasTables opens the intercept's tables.
func biasTables(info *tasks.Info) (b, state tasks.Table, err error) {
	if b, err = info.Table(lr.BiasTable(TableW)); err != nil {
		return nil, nil, fmt.Errorf("svrg: intercept: %w (the task adds it when the svrg stages are registered; or set intercept = false)", err)
	}
	if state, err = info.Table(TableBiasState); err != nil {
		return nil, nil, fmt.Errorf("svrg: intercept: %w (or set intercept = false)", err)
	}
	if state.Spec().Size < biasStateSize {
		return nil, nil, fmt.Errorf("svrg: table %q has %d keys, want %d", TableBiasState, state.Spec().Size, biasStateSize)
	}
	return b, state, nil
}

// divergedLoss is a mean log-loss taken as divergence (as in lr.sgd): the
// model gives the true label a probability below e^-1000 on average.
const divergedLoss = 1000

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

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

// label maps 1 to 1 and 0 or -1 to 0; anything else is an error (a
// multi-class or regression file given to a binary classifier).
func label(y float64) (float64, error) {
	switch y {
	case 1:
		return 1, nil
	case 0, -1:
		return 0, nil
	}
	return 0, fmt.Errorf("svrg: label %v: binary logistic regression takes labels 1 (positive) and 0 or -1 (negative)", y)
}
