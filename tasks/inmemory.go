package tasks

import (
	"fmt"

	"github.com/flexps/flexps/kvstore"
)

// DenseInMemory is a TaskParamsFunc for stage function fn, whose tables
// are named by the given params (each defaulting to the param's own
// name): it refuses a stage of fn that holds the model in one slave's
// memory (OneSlave: the local, hogwild and single kinds) over a sparse
// one of them. The slave refuses such a table when the stage opens it,
// but that came after the stages before it had run; registered with
// RegisterTaskParams, the task is refused at submission, naming the
// param's line (or the stage's params) instead.
func DenseInMemory(fn string, params ...string) TaskParamsFunc {
	return func(t *MultiStageTask) (int, string, error) {
		for i, s := range t.Stages {
			if s.Func != fn || !s.OneSlave() {
				continue
			}
			for _, key := range params {
				spec, ok := t.TableSpec(s.Params.String(key, key))
				if !ok || spec.Storage == kvstore.Dense {
					continue
				}
				param := key
				if _, set := s.Params[key]; !set {
					param = ""
				}
				return i, param, SparseInMemory(fn, s, spec)
			}
		}
		return -1, "", nil
	}
}

// SparseInMemory is why stage s of function fn cannot hold table spec in
// one slave's memory: the table is sparse and the stage a local, hogwild
// or single one (nil otherwise).
func SparseInMemory(fn string, s Stage, spec kvstore.TableSpec) error {
	spec = spec.WithDefaults()
	if !s.OneSlave() || spec.Storage == kvstore.Dense {
		return nil
	}
	return fmt.Errorf("%s: table %q is %s, but %s stages hold the model in memory and need dense tables (sparse storage is for ps stages): set worker_kind = \"ps\" or storage = \"dense\"",
		fn, spec.Name, spec.Storage, s.WorkerKind)
}
