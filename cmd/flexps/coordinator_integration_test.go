package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// TestCoordinatorSlaveDiesMidStage kills, mid-stage, the slave of the
// worker that does a stage's collective step after each Barrier (rank 0:
// kmeans.lloyd's center update). The stage survives (replicas = 2), so
// the survivors must take that step over: the model must be the one an
// undisturbed run writes. Before, only rank 0 updated: the survivors ran
// every remaining iteration on the centers as they were, the task ended
// "done", and the model held kmeans.init's seeds (a drill: objective
// 11,371,482 against 6,404,652 undisturbed), the objective column empty.
func TestCoordinatorSlaveDiesMidStage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "blobs.libsvm")
	writeBlobs(t, data, 30000, 4, 5)
	command, env := cli()
	for _, tc := range []struct {
		name   string
		victim int // slave index; slave-0 runs ranks 0 and 1
		ranks  string
	}{
		{"the updater's slave", 0, "its workers 0, 1"},
		{"another slave", 2, "its workers 4, 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(name string, kill bool) (float64, string) {
				c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 3, Slots: 2, Heartbeat: "100ms", DeadAfter: "600ms"})
				defer c.Stop()
				out := filepath.Join(dir, name+".model")
				job := filepath.Join(dir, name+".toml")
				spec := fmt.Sprintf(`name = %q
kind = "kmeans"
output = %q
[[table]]
name = "centers"
size = 5
width = 4
replicas = 2
[input.train]
path = %q
block_size = 16384
[[stage]]
name = "init"
func = "kmeans.init"
workers = 1
consistency = "bsp"
[stage.params]
k = 5
restarts = 3
[[stage]]
name = "lloyd"
func = "kmeans.lloyd"
workers = 6
consistency = "bsp"
[stage.params]
k = 5
restarts = 3
iterations = 150
tol = 0
`, name, out, data)
				if err := os.WriteFile(job, []byte(spec), 0o644); err != nil {
					t.Fatal(err)
				}
				cl := c.Client()
				done := make(chan clustertest.Result, 1)
				go func() { done <- c.Run(3*time.Minute, "submit", job) }()
				if kill {
					waitUntil(t, "lloyd past its third iteration", time.Minute, func() bool {
						rep, err := cl.Status(context.Background(), "")
						return err == nil && len(rep.Tasks) == 1 && rep.Tasks[0].State == status.Running && rep.Tasks[0].Stage == 1 && rep.Tasks[0].Progress.Epoch >= 3
					})
					c.Slaves[tc.victim].Kill()
				}
				r := <-done
				if r.Exit != 0 {
					t.Fatalf("%s: the task failed (%d):\n%s\n%s", name, r.Exit, r.Stdout, r.Stderr)
				}
				ev, err := tasks.Evaluate(context.Background(), out, data, "", "")
				if err != nil {
					t.Fatal(err)
				}
				return ev.Metrics[tasks.MetricObjective], r.Stdout
			}
			calm, _ := run("calm-"+fmt.Sprint(tc.victim), false)
			killed, stdout := run("killed-"+fmt.Sprint(tc.victim), true)
			if !strings.Contains(stdout, tc.ranks) {
				t.Fatalf("the kill did not hit the workers it aims at (%q):\n%s", tc.ranks, stdout)
			}
			t.Logf("objective: undisturbed %.6f, slave-%d killed %.6f", calm, tc.victim, killed)
			if math.Abs(killed-calm) > 1e-6*calm {
				t.Fatalf("objective %.6f after the kill, %.6f undisturbed: the survivors did not finish the centers' updates", killed, calm)
			}
		})
	}
}

// writeBlobs writes n points of dims features around k seeded centers
// (LIBSVM, the cluster as label).
func writeBlobs(t *testing.T, path string, n, dims, k int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 5))
	centers := make([][]float64, k)
	for i := range centers {
		centers[i] = make([]float64, dims)
		for f := range centers[i] {
			centers[i][f] = rng.NormFloat64() * 10
		}
	}
	var b strings.Builder
	for range n {
		c := rng.IntN(k)
		fmt.Fprintf(&b, "%d", c)
		for f := range dims {
			fmt.Fprintf(&b, " %d:%.5f", f+1, centers[c][f]+rng.NormFloat64()*2)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
