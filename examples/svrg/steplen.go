package svrg

import (
	"fmt"
	"math"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// TableStep holds the step-size estimate svrg.sgd shares between its
// workers and rounds: the sum of the workers' curvature estimates (key 0)
// and how many workers added one (key 1).
const TableStep = "w.svrg.step"

// withL2 folds the regularization into the preconditioner: each feature's
// scale grows from its standard deviation (or root mean square) s to
// sqrt(s^2 + 4 l2), so that the curvature of every preconditioned
// coordinate, at most s^2/4 from the log-loss plus l2 from the
// regularization, is at most 1/4. With raw-space l2, a feature of tiny
// spread (a standard deviation of 0.003) otherwise has a preconditioned
// l2 curvature thousands of times its data curvature, and one step size
// cannot suit both. The centered features' offsets follow their new
// scales. The optimum does not change: only the path to it.
func (s *step) withL2(inv []float64, l2 float64) {
	if !(l2 > 0) {
		return
	}
	old := make(map[uint64]float64, 0)
	if s.cent != nil {
		for _, k := range s.cent.Keys {
			old[k] = inv[k]
		}
	}
	for k, v := range inv {
		if v > 0 {
			inv[k] = 1 / math.Sqrt(1/(v*v)+4*l2)
		}
	}
	if s.cent == nil {
		return
	}
	s.cent.NormC = 0
	for j, k := range s.cent.Keys {
		s.cent.C[j] *= inv[k] / old[k]
		s.cent.Inv[j] = inv[k]
		s.cent.NormC += s.cent.C[j] * s.cent.C[j]
	}
}

// powerIterations bounds curvature's power iteration; 50 steps give the
// largest eigenvalue within a few percent on any batch tried.
const powerIterations = 50

// curvature estimates L, the largest eigenvalue of the preconditioned
// Hessian bound (1/B) sum x'x'^T / 4 + l2 d of batch b, by power
// iteration: x' are the features as the inner steps see them (scaled by
// inv, centered ones shifted, plus with intercept the constant 1).
func curvature(s *step, b *datastore.Records, inv []float64, intercept bool) float64 {
	pos := map[uint64]int{}
	var keys []uint64
	add := func(k uint64) {
		if _, ok := pos[k]; !ok {
			pos[k] = len(keys)
			keys = append(keys, k)
		}
	}
	for _, k := range b.Keys {
		add(k)
	}
	var cpos []int
	if s.cent != nil {
		for _, k := range s.cent.Keys {
			add(k)
			cpos = append(cpos, pos[k])
		}
	}
	n := len(keys)
	dim := n
	if intercept {
		dim++ // the intercept's coordinate, at n
	}
	sc := func(k uint64) float64 {
		if inv == nil {
			return 1
		}
		return inv[k]
	}
	v, hv := make([]float64, dim), make([]float64, dim)
	for i := range v {
		v[i] = 1 / math.Sqrt(float64(dim))
	}
	lambda := 0.0
	rows := float64(max(b.Len(), 1))
	for range powerIterations {
		clear(hv)
		base := 0.0 // the centered features' common part of x'.v
		for j, p := range cpos {
			base -= s.cent.C[j] * v[p]
		}
		if intercept {
			base += v[n]
		}
		sumDot := 0.0
		for i := 0; i < b.Len(); i++ {
			_, ks, vs := b.Row(i)
			dot := base
			for j, k := range ks {
				dot += v[pos[k]] * vs[j] * sc(k)
			}
			sumDot += dot
			for j, k := range ks {
				hv[pos[k]] += dot * vs[j] * sc(k)
			}
		}
		for j, p := range cpos {
			hv[p] -= sumDot * s.cent.C[j]
		}
		if intercept {
			hv[n] += sumDot
		}
		norm := 0.0
		for i := range hv {
			hv[i] /= 4 * rows
			if i < n {
				k := keys[i]
				hv[i] += s.l2 * sc(k) * sc(k) * v[i]
			}
			norm += hv[i] * hv[i]
		}
		norm = math.Sqrt(norm)
		if !(norm > 0) {
			break
		}
		lambda = norm // |Hv| with |v| = 1
		for i := range v {
			v[i] = hv[i] / norm
		}
	}
	return lambda
}

// curvatureRows is how many records each worker's curvature estimate
// reads (wrapping around a smaller share): one batch of 50 rows gave step
// sizes that varied from run to run with the block a worker happened to
// read first, and on breast_cancer's raw features a round-8 objective of
// 0.0651 instead of 0.0630 in one run of eight.
const curvatureRows = 2048

// autoLR chooses svrg.sgd's step size 1/L: L is the mean over the workers
// of the curvature of their first curvatureRows records (each worker adds
// its estimate to TableStep and reads the mean after a Barrier, so all
// step alike, as the lazy updates need). The first svrg.sgd stage of a
// task measures; later ones reuse it (the preconditioned curvature does
// not depend on the model). 1/L is the classic safe step of
// (variance-reduced) SGD on a smooth loss (scikit-learn's SAG takes the
// same). It used to be 1/(2 L) of a single batch, whose curvature varies
// with the batch: measured on 2048 rows the curvature is stable and 1/L
// converges faster on every data set of scripts/quality.sh (breast_cancer
// raw: 0.0620 after 8 rounds where 1/(2 L) reached 0.0641).
func autoLR(info *tasks.Info, s *step, b *datastore.Records, inv []float64) (float64, error) {
	t, err := info.Table(TableStep)
	if err != nil {
		return 0, fmt.Errorf("svrg: lr: %w (the task adds it when the svrg stages are registered; or set lr)", err)
	}
	keys := []uint64{0, 1}
	v := make([]float64, 2)
	if err := t.Get(keys, v); err != nil {
		return 0, err
	}
	// Every worker has read the count before anyone adds.
	if err := info.Barrier(); err != nil {
		return 0, err
	}
	if v[1] == 0 {
		// A worker without records (an empty share) measures nothing.
		if b.Len() > 0 {
			l := curvature(s, b, inv, s.b != nil)
			if !(l > 0) || math.IsInf(l, 0) {
				return 0, fmt.Errorf("svrg.sgd: stage %q: cannot estimate the step size from the data (curvature %v): set lr", info.StageName, l)
			}
			if err := t.Add(keys, []float64{l, 1}); err != nil {
				return 0, err
			}
		}
		if err := info.Barrier(); err != nil {
			return 0, err
		}
		if err := t.Get(keys, v); err != nil {
			return 0, err
		}
		if v[1] == 0 {
			return 0, fmt.Errorf("svrg.sgd: stage %q: no worker read a record to estimate the step size from: set lr", info.StageName)
		}
	}
	lr := 1 / (v[0] / v[1])
	info.Log.Debug().Float64("lr", lr).Float64("curvature", v[0]/v[1]).Msg("svrg.sgd: step size from the data")
	return lr, nil
}
