package mf

import (
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// refitBiases ends an epoch with one exact coordinate-descent step on the
// biases: every item's bias and then every user's is set to its
// regularized least-squares value given the rest of the model,
//
//	b_i = sum over i's ratings (r - pred + b_i) / (n_i + l2_bias)
//
// Biases are linear, so this is their exact minimum, where SGD only
// hovers around it at a distance set by the learning rate: on noisy data
// (InstEval) that distance is as large as everything the factors explain.
// Each side costs one pass over the worker's training share (residuals
// summed locally, then added into the count table's scratch column), a
// barrier, each worker setting its share of the keys (and clearing the
// scratch), and a barrier.
func refitBiases(info *tasks.Info, m *MiniBatch, train tasks.Input, cfg Config, l2 float64) error {
	for _, s := range []*side{m.items, m.users} {
		acc := map[uint64]float64{}
		commit := func() error { // tasks.EachRecordsCommit
			if err := addScratch(s.count, acc); err != nil {
				return err
			}
			clear(acc)
			return s.count.Flush()
		}
		err := tasks.EachBatchCommit(info.Ctx, train, 4096, func(r *datastore.Records, lo, hi int) error {
			if err := m.gather(r, lo, hi, false); err != nil {
				return err
			}
			for i := lo; i < hi; i++ {
				p, u, v := m.predict(r, i)
				pos := u
				if s == m.items {
					pos = v
				}
				acc[s.keys[pos]] += r.Labels[i] - p + s.b[pos]
			}
			return nil
		}, commit)
		if err != nil {
			return fmt.Errorf("input %q: %w", cfg.Train, err)
		}
		if err := addScratch(s.count, acc); err != nil {
			return err
		}
		if err := info.Barrier(); err != nil {
			return err
		}
		if err := setShare(info, s, l2); err != nil {
			return err
		}
		if err := info.Barrier(); err != nil {
			return err
		}
	}
	return nil
}

// addScratch adds the residual sums into the count table's last column
// (a non-finite sum adds nothing and wraps ErrDiverged: see addRows).
func addScratch(tab tasks.Table, acc map[uint64]float64) error {
	rows := make(map[uint64][]float64, len(acc))
	flat := make([]float64, len(acc))
	i := 0
	for k, v := range acc {
		flat[i] = v
		rows[k] = flat[i : i+1 : i+1]
		i++
	}
	return addRows(tab, rows, countWidth, 2, 1)
}

// setShare sets the biases of this worker's share of the keys from the
// summed residuals and clears the scratch column.
func setShare(info *tasks.Info, s *side, l2 float64) error {
	size := s.bias.Spec().Size
	if cs := s.count.Spec().Size - 1; cs < size {
		size = cs
	}
	// Split by Share, not Rank: after a slave's death the survivors'
	// shares still cover every key (before, the dead workers' keys were
	// skipped: their biases not refit, their y_j not shrunk, their z not
	// recomputed).
	cnt := make([]float64, countWidth*chunkKeys)
	cur := make([]float64, chunkKeys)
	return tasks.EachShareKeys(info, s.count, size, chunkKeys, func(keys []uint64) error {
		c, b := cnt[:countWidth*len(keys)], cur[:len(keys)]
		if err := s.count.Get(keys, c); err != nil {
			return err
		}
		if err := s.bias.Get(keys, b); err != nil {
			return err
		}
		for i := range b {
			row := c[countWidth*i : countWidth*(i+1)]
			b[i] = row[2]/(row[0]+l2) - b[i]
			row[0], row[1], row[2] = 0, 0, -row[2]
		}
		if err := s.bias.Add(keys, b); err != nil {
			return err
		}
		return s.count.Add(keys, c)
	})
}
