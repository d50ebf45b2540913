package kmeans

import (
	"errors"
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// Lloyd is the kmeans.lloyd stage function (see the package doc for the
// clock protocol).
func Lloyd(info *tasks.Info) error {
	if err := info.RequireBSP("kmeans.lloyd"); err != nil {
		return err
	}
	cfg, err := ConfigFrom(info.Params)
	if err != nil {
		return err
	}
	ct, dims, err := cfg.centersTable(info)
	if err != nil {
		return err
	}
	acc, err := info.Table(cfg.Acc)
	if err != nil {
		return fmt.Errorf("kmeans: %w", err)
	}
	if err := checkDims(acc, cfg.Acc, cfg.K, dims+1); err != nil {
		return err
	}
	train, err := info.Input(cfg.Train)
	if err != nil {
		return fmt.Errorf("kmeans: %w", err)
	}
	k, w := cfg.K, dims+1
	keys := seqKeys(k)
	cs := NewCenters(k, dims, make([]float64, k*dims))
	sums := make([]float64, k*w)
	var read, delta []float64
	if info.Rank == 0 {
		read, delta = make([]float64, k*w), make([]float64, k*dims)
	}
	for it := info.StartEpoch + 1; it <= cfg.Iterations; it++ {
		// Clock 2(it-1): a BSP read waits for every worker's previous
		// clock, so it sees worker 0's update of the last iteration.
		if err := ct.Get(keys, cs.C); err != nil {
			return err
		}
		cs.Update()
		clear(sums)
		n, obj := int64(0), 0.0
		err := tasks.EachRecords(info.Ctx, train, func(r *datastore.Records) error {
			for i := 0; i < r.Len(); i++ {
				_, fk, fv := r.Row(i)
				j, d, err := cs.Nearest(fk, fv, true)
				if err != nil {
					return err
				}
				s := sums[j*w : (j+1)*w]
				for t, key := range fk {
					s[key] += fv[t]
				}
				s[dims]++
				obj += d
			}
			n += int64(r.Len())
			info.Report(int64(r.Len()), 0)
			return nil
		})
		if err != nil {
			if errors.Is(err, ErrDims) {
				return fmt.Errorf("kmeans.lloyd: input %q: %w (table %q)", cfg.Train, err, cfg.Centers)
			}
			return fmt.Errorf("kmeans.lloyd: input %q: %w", cfg.Train, err)
		}
		if err := acc.Add(keys, sums); err != nil {
			return err
		}
		if err := info.Clock(); err != nil {
			return err
		}
		if info.Rank == 0 {
			if err := update(ct, acc, keys, cs, read, delta); err != nil {
				return err
			}
		}
		if err := info.Clock(); err != nil {
			return err
		}
		info.ReportEpoch(it, map[string]float64{tasks.MetricObjective: obj, tasks.MetricSamples: float64(n)})
	}
	return nil
}

// update is worker 0's half-iteration at clock 2t+1: read the summed
// partials, move each center to its points' mean (a cluster without
// points keeps its center) and reset acc to zero by adding its negation
// (x + -x is exactly 0 in floating point).
func update(ct, acc tasks.Table, keys []uint64, cs *Centers, read, delta []float64) error {
	if err := acc.Get(keys, read); err != nil {
		return err
	}
	dims, w := cs.Dims, cs.Dims+1
	for j := range cs.K {
		s := read[j*w : (j+1)*w]
		c, dl := cs.C[j*dims:(j+1)*dims], delta[j*dims:(j+1)*dims]
		for f := range dims {
			dl[f] = 0
			if n := s[dims]; n > 0 {
				dl[f] = s[f]/n - c[f]
			}
		}
	}
	if err := ct.Add(keys, delta); err != nil {
		return err
	}
	for i := range read {
		read[i] = -read[i]
	}
	return acc.Add(keys, read)
}
