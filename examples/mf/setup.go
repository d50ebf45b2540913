package mf

import (
	"fmt"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// tableSetup refuses, at submission, an mf.sgd stage that holds the model
// in one slave's memory (the local, hogwild and single kinds) over a
// sparse table: the stage reads its factor and bias tables into dense
// arrays, and said so only when it started, after the stages before it
// had run ("mf: table \"users\": local stages hold the model in memory and
// need dense tables").
func tableSetup(t *tasks.MultiStageTask) (int, string, error) {
	for i, s := range t.Stages {
		if s.Func != "mf.sgd" || !s.OneSlave() {
			continue
		}
		for _, key := range []string{"users", "items", "bias", "user_bias", "item_bias"} {
			name := s.Params.String(key, key)
			for _, spec := range t.Tables {
				if spec.Name != name || spec.WithDefaults().Storage == kvstore.Dense {
					continue
				}
				param := key
				if _, set := s.Params[key]; !set {
					param = ""
				}
				return i, param, fmt.Errorf("mf.sgd: table %q is %s, but %s stages hold the model in memory and need dense tables (sparse storage is for ps stages): set worker_kind = \"ps\" or storage = \"dense\"", name, spec.WithDefaults().Storage, s.WorkerKind)
			}
		}
	}
	return -1, "", nil
}
