package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/internal/testkit"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// Lapse's stress test on real processes: six workers on three slave
// processes add known values to a table while they localize random key
// sets every 200 operations (moves overlapping accesses, across slaves,
// under ASP, SSP and SSP with the process cache). Each stage checks every
// key against the exact sum; a local-kind stage loads the first table
// from wherever its keys ended up and checks it again; the written model
// must hold the same sums.
func TestLocalizeStressOnProcesses(t *testing.T) {
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 3, Slots: 2})
	dir := t.TempDir()
	out := filepath.Join(dir, "model.bin")
	const ops, every, nkeys, size = 3000, 200, 24, 500
	job := filepath.Join(dir, "stress.toml")
	stage := func(name, table, consistency string, seed int, extraKeys string) string {
		return fmt.Sprintf(`[[stage]]
name = %q
func = %q
workers = 6
consistency = %q
%s
%s
[stage.params]
table = %q
ops = %d
every = %d
keys = %d
seed = %d
`, name, testkit.LocalizeStress, consistency, extra(consistency, 2), extraKeys, table, ops, every, nkeys, seed)
	}
	spec := fmt.Sprintf(`name = "stress"
output = %q
[[table]]
name = "w"
size = %d
replicas = 1
[[table]]
name = "v"
size = %d
storage = "sparse"
partition = "hash"
replicas = 1
[[table]]
name = "u"
size = %d
replicas = 1
`, out, size, size, size) + stage("asp", "w", "asp", 1, "") + stage("ssp", "v", "ssp", 2, "") +
		stage("ssp-cache", "u", "ssp", 3, "cache = \"lru\"\ncache_size = 100") + fmt.Sprintf(`[[stage]]
name = "check-local"
func = %q
workers = 1
worker_kind = "local"
[stage.params]
table = "w"
seed = 1
workers = 6
ops = %d
every = %d
keys = %d
`, testkit.CheckStress, ops, every, nkeys)
	if err := os.WriteFile(job, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	r := submitOK(t, c, job)
	t.Logf("flexps submit:\n%s", r.Stdout)
	if !strings.Contains(r.Stdout, "keys relocated") {
		t.Error("the stage summary does not report relocations")
	}
	st := lastTask(t, c)
	if st.State != status.Done || len(st.Results) != 4 {
		t.Fatalf("task: %+v", st)
	}
	for _, r := range st.Results {
		if len(r.Epochs) != 1 || r.Epochs[0].Metrics[testkit.KeysChecked] != size {
			t.Fatalf("stage %s: %+v", r.Name, r.Epochs)
		}
	}
	m, err := tasks.LoadModel(out)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"w", "v", "u"} {
		want := testkit.StressSums(uint64(i+1), 6, ops, every, nkeys, size)
		tb, ok := m.Table(name)
		if !ok {
			t.Fatalf("model has no table %s", name)
		}
		got := tb.DenseValues()
		for k := range want {
			if got[k] != want[k] {
				t.Fatalf("model table %s key %d = %v, want %v", name, k, got[k], want[k])
			}
		}
	}
}
