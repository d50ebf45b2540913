package lr

import (
	"fmt"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// tableSetup checks, at submission, what an lr.sgd stage asks of its
// weight table: declared, one value per key, dense when it is
// standardized or held in one slave's memory (the local, hogwild and
// single kinds). The stage makes the same checks when it starts, but
// there they came after the stages before it had run: a task whose
// second stage trained a sparse table with worker_kind = "local" was
// accepted, ran its first stage, then failed (and a checkpoint of it
// kept the spec, so a resume failed again).
func tableSetup(t *tasks.MultiStageTask) (int, string, error) {
	for i, s := range t.Stages {
		if s.Func != "lr.sgd" {
			continue
		}
		name := s.Params.String("table", "w")
		var w *kvstore.TableSpec
		for j := range t.Tables {
			if t.Tables[j].Name == name {
				w = &t.Tables[j]
			}
		}
		if w == nil {
			return i, "table", fmt.Errorf("lr.sgd: the task declares no table %q (the weights: declare it, or set table to one it declares)", name)
		}
		spec := w.WithDefaults()
		if spec.Width != 1 {
			return i, "table", fmt.Errorf("lr: table %q: width must be 1 (one weight per feature), got %d", name, spec.Width)
		}
		if spec.Storage == kvstore.Dense {
			continue
		}
		if s.Params.Bool("standardize", StandardizeDefault(spec)) {
			return i, "standardize", fmt.Errorf("lr: standardize needs a dense table; table %q is %s (set standardize = false)", name, spec.Storage)
		}
		if err := tasks.SparseInMemory("lr.sgd", s, spec); err != nil {
			return i, "table", err
		}
		if spec.Init != "zero" && s.Params.Float("l2", 0) > 0 {
			// The decay pass visits the keys the table stores
			// (tasks.EachShareKeys): one never written keeps its init
			// value undecayed, where a dense table decays every key.
			return i, "l2", fmt.Errorf("lr: l2 over a sparse table needs init = \"zero\"; table %q starts at %q, and the decay visits only the keys written, so the others would keep their start undecayed", name, spec.Init)
		}
	}
	return -1, "", nil
}
