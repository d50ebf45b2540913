package kge

import (
	"fmt"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// tableSetup refuses, at submission, a kge.complex stage that holds the
// model in one slave's memory (the local, hogwild and single kinds) over
// a sparse entities or relations table: it said so only when its workers
// started ("kge: table \"entities\": local stages hold the model in memory
// and need dense tables"), after the stages before it had run.
func tableSetup(t *tasks.MultiStageTask) (int, string, error) {
	for i, s := range t.Stages {
		if s.Func != "kge.complex" || !s.OneSlave() {
			continue
		}
		for _, key := range []string{"entities", "relations"} {
			name := s.Params.String(key, key)
			for _, spec := range t.Tables {
				if spec.Name != name || spec.WithDefaults().Storage == kvstore.Dense {
					continue
				}
				param := key
				if _, set := s.Params[key]; !set {
					param = ""
				}
				return i, param, fmt.Errorf("kge.complex: table %q is %s, but %s stages hold the model in memory and need dense tables (sparse storage is for ps stages): set worker_kind = \"ps\" or storage = \"dense\"", name, spec.WithDefaults().Storage, s.WorkerKind)
			}
		}
	}
	return -1, "", nil
}
