package main

import (
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/examples/lr"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

type float interface{ ~float32 | ~float64 }

// plainSGD is the baseline: the same mini-batch SGD as lr.sgd (weights
// read before the batch, gradient of the mean logistic loss, one update per
// batch, batches cut inside each parsed batch as lr.sgd cuts them) on plain
// arrays in one goroutine, over records already in memory. Weights are
// stored as the table's dtype, so rounding matches the engine's.
func plainSGD(o options, train []*datastore.Records, test *datastore.Records) result {
	if o.dtype == string(kvstore.Float64) {
		return plainSGDT[float64](o, train, test)
	}
	return plainSGDT[float32](o, train, test)
}

func plainSGDT[T float](o options, train []*datastore.Records, test *datastore.Records) result {
	res := result{Name: "plain Go loop"}
	w := make([]T, o.dim)
	grad := make([]float64, o.dim)
	stamp := make([]int32, o.dim) // stamp[k] == batch number when k is in touched
	var touched []uint64
	var nb int32
	for epoch := 1; epoch <= o.epochs; epoch++ {
		start := time.Now()
		var st lr.Stats
		for _, r := range train {
			for lo := 0; lo < r.Len(); lo += o.batch {
				hi := min(lo+o.batch, r.Len())
				touched = touched[:0]
				nb++
				for i := lo; i < hi; i++ {
					a, b := r.Offsets[i], r.Offsets[i+1]
					keys, vals := r.Keys[a:b], r.Vals[a:b]
					y := 0.0
					if r.Labels[i] > 0 {
						y = 1
					}
					z := 0.0
					for j, k := range keys {
						z += float64(w[k]) * vals[j]
					}
					st.N++
					st.LossSum += lr.LogLoss(z, y)
					if (z > 0) == (y == 1) {
						st.Correct++
					}
					g := lr.Sigmoid(z) - y
					for j, k := range keys {
						if stamp[k] != nb {
							stamp[k] = nb
							touched = append(touched, k)
						}
						grad[k] += g * vals[j]
					}
				}
				scale := -o.lr / float64(hi-lo)
				for _, k := range touched {
					w[k] = T(float64(w[k]) + scale*grad[k])
					grad[k] = 0
				}
			}
		}
		el := time.Since(start).Seconds()
		res.Seconds += el
		res.Samples += st.N
		res.EpochSeconds = append(res.EpochSeconds, el)
		res.EpochSamplesPS = append(res.EpochSamplesPS, float64(st.N)/el)
		res.TrainLoss = st.LossSum / float64(st.N)
	}
	res.SamplesPerS = float64(res.Samples) / res.Seconds
	var laterN, laterS float64
	for i, s := range res.EpochSeconds {
		if i >= 1 {
			laterS += s
			laterN += res.EpochSamplesPS[i] * s
		}
	}
	if laterS > 0 {
		res.LaterPerS = laterN / laterS
	}
	// Score with the evaluator the engine's models go through.
	vals := make([]float64, len(w))
	for i, v := range w {
		vals[i] = float64(v)
	}
	m := &tasks.Model{Kind: "lr", Tables: []tasks.ModelTable{{Spec: kvstore.TableSpec{Name: "w", Size: uint64(o.dim), Width: 1}, Dense: true, Vals: vals}}}
	if ev, err := lr.EvalModel(m, test); err == nil {
		res.TestAccuracy, res.TestLogLoss = ev["accuracy"], ev["logloss"]
	}
	return res
}
