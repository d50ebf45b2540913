package svrg

import (
	"fmt"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// tableSetup checks, at submission, what the svrg stages ask of the
// tables they read (w, snap, mu, n): dense when a stage is standardized
// or holds the model in one slave's memory (the local, hogwild and single
// kinds; the shipped config runs svrg.sgd as local). The stages make the
// same checks when they start, but there they came after the stages
// before them had run: with a sparse w, configs/svrg.toml ran its first
// full stage and then failed in svrg.sgd.
func tableSetup(t *tasks.MultiStageTask) (int, string, error) {
	for i, s := range t.Stages {
		if s.Func != "svrg.full" && s.Func != "svrg.sgd" {
			continue
		}
		for _, spec := range t.Tables {
			switch spec.Name {
			case TableW, TableSnap, TableMu, TableN:
			default:
				continue
			}
			spec = spec.WithDefaults()
			if spec.Storage == kvstore.Dense {
				continue
			}
			if spec.Name == TableW && s.Params.Bool("standardize", false) {
				return i, "standardize", fmt.Errorf("svrg: standardize needs a dense table; table %q is %s (set standardize = false)", TableW, spec.Storage)
			}
			if err := tasks.SparseInMemory(s.Func, s, spec); err != nil {
				return i, "", err
			}
		}
	}
	return -1, "", nil
}

// sgdTaskParams are svrg.sgd's task checks: the objective it shares with
// the full stage, and its tables.
var sgdTaskParams = tasks.AllOf(sharedParams, tableSetup)
