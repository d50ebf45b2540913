package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/internal/testkit"
	"github.com/flexps/flexps/status"
)

// The consistency checker stage (testkit.cons_check: every read checked
// against the model's bounds, uneven iteration counts, a worker with
// none) on three slave processes: BSP, SSP and SparseSSP on replicated
// tables with and without the process cache, and BSP/SSP with keys
// relocated mid-stage (the forwarded Adds a Clock once overtook).
func TestConsistencyCheckerOnProcesses(t *testing.T) {
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 3, Slots: 2})
	dir := t.TempDir()
	spec := "name = \"cons\"\n"
	n := 0
	stage := func(table, consistency, extraKeys string, localize int, read string) string {
		n++
		// Every stage has its own table: the checker counts from zero.
		return fmt.Sprintf(`[[table]]
name = "t%d"
size = 60
%s
[[stage]]
name = "s%d"
func = %q
workers = 5
consistency = %q
%s
%s
[stage.params]
table = "t%d"
iters = "20,3,0,20,8"
skew = 500
localize = %d
read = %q
`, n, table, n, testkit.ConsCheck, consistency, extra(consistency, 1), extraKeys, n, localize, read)
	}
	r2, r3 := "replicas = 2", "replicas = 3\ndtype = \"float32\"\nstorage = \"sparse\"\npartition = \"hash\""
	spec += stage(r2, "bsp", "", 0, "get") + stage(r2, "ssp", "cache = \"lru\"\ncache_size = 100", 0, "next") +
		stage(r3, "bsp", "cache = \"lfu\"\ncache_size = 100", 0, "async") + stage(r3, "sparse_ssp", "", 0, "chunk") +
		stage("replicas = 1", "bsp", "", 3, "get") + stage("replicas = 1", "ssp", "", 2, "next") +
		stage("replicas = 1", "asp", "", 2, "async")
	job := filepath.Join(dir, "cons.toml")
	if err := os.WriteFile(job, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	submitOK(t, c, job)
	st := lastTask(t, c)
	if st.State != status.Done || len(st.Results) != n {
		t.Fatalf("task: %+v", st)
	}
	for _, r := range st.Results {
		if len(r.Epochs) != 1 || r.Epochs[0].Metrics[testkit.ConsChecked] == 0 {
			t.Fatalf("stage %s checked nothing: %+v", r.Name, r.Epochs)
		}
	}
}
