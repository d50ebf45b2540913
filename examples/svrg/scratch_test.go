package svrg_test

import (
	"os"
	"testing"

	"github.com/flexps/flexps/examples/svrg"
	"github.com/flexps/flexps/tasks"
)

func TestScratch(t *testing.T) {
	if os.Getenv("SVRG_SCRATCH") == "" {
		t.Skip()
	}
	train := data(t)
	for _, w := range []int{1, 2} {
		for _, e := range []int{1, 2} {
			for _, rate := range []float64{0.25, 0.5, 1} {
				kind := tasks.KindLocal
				if w == 1 {
					kind = tasks.KindSingle
				}
				st := run(t, svrg.Task(svrg.Config{Train: train, BlockSize: 32 << 10, Dim: dim, Rounds: 4, FullWorkers: 2,
					SGDWorkers: w, SGDKind: kind, EpochsInner: e, Batch: 10, LR: rate, L2: 1e-3, FinalObjective: true}))
				t.Logf("workers %d inner %d lr %v: %.6f", w, e, rate, fullObjectives(t, st))
			}
		}
	}
}
