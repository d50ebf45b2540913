package tasks_test

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// DenseInMemory refuses a one-slave stage of its function over a sparse
// table one of its params names (by default the param's own name), and
// names the param when it is set.
func TestDenseInMemory(t *testing.T) {
	check := tasks.DenseInMemory("f", "model")
	for _, tc := range []struct {
		name    string
		storage kvstore.Storage
		kind    string
		fn      string
		params  tasks.Params
		want    string // "" : no error
		param   string
	}{
		{"dense local", kvstore.Dense, tasks.KindLocal, "f", nil, "", ""},
		{"sparse ps", kvstore.Sparse, tasks.KindPS, "f", nil, "", ""},
		{"sparse local, another function", kvstore.Sparse, tasks.KindLocal, "g", nil, "", ""},
		{"sparse local", kvstore.Sparse, tasks.KindLocal, "f", nil, `f: table "model" is sparse, but local stages hold the model in memory`, ""},
		{"sparse hogwild, named by its param", kvstore.Sparse, tasks.KindHogwild, "f", tasks.Params{"model": "m"}, `f: table "m" is sparse, but hogwild stages`, "model"},
		{"sparse single", kvstore.Sparse, tasks.KindSingle, "f", nil, `but single stages`, ""},
		{"param naming another table", kvstore.Sparse, tasks.KindLocal, "f", tasks.Params{"model": "other"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "model"
			if _, ok := tc.params["model"]; ok && tc.params["model"] != "other" {
				name = tc.params.String("model", "")
			}
			task := tasks.NewTask("t").AddTable(kvstore.TableSpec{Name: name, Size: 10, Storage: tc.storage}).
				SetStages(tasks.Stage{Name: "a", Func: "other"}, tasks.Stage{Name: "b", Func: tc.fn, WorkerKind: tc.kind, Params: tc.params})
			i, param, err := check(task)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "":
				return
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			case i != 1 || param != tc.param:
				t.Fatalf("stage %d, param %q; want stage 1, param %q", i, param, tc.param)
			}
		})
	}
}
