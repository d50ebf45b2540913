package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/status"
)

// TestSubmitSeveralJobsKeepsCommandLineOrder: `flexps submit a b c ...`
// hands the master its tasks in the order of the command line, so a
// master that schedules in submission order (sequential, and prioritized
// among equal priorities) runs them in that order. Before, submit sent
// every job from its own goroutine at once, and the master saw (and ran)
// them in whatever order those goroutines reached it.
func TestSubmitSeveralJobsKeepsCommandLineOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	command, env := cli()
	const jobs = 6
	var paths, want []string
	for i := range jobs {
		name := fmt.Sprintf("j%d", i)
		// Every task takes all 4 slots, so under either policy one runs
		// at a time and the others queue.
		paths = append(paths, lrJob(t, dir, name, train, test, filepath.Join(dir, name+".model"), 300, 4, 1, "asp"))
		want = append(want, name)
	}
	for _, policy := range []string{"sequential", "prioritized"} {
		t.Run(policy, func(t *testing.T) {
			c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, Policy: policy})
			r := c.Run(3*time.Minute, append([]string{"submit", "--log-level", "warn"}, paths...)...)
			if r.Exit != 0 {
				t.Fatalf("flexps submit failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
			}
			rep, err := c.Client().Status(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			ts := rep.Tasks
			if len(ts) != jobs {
				t.Fatalf("status lists %d tasks, want %d: %+v", len(ts), jobs, ts)
			}
			for _, tk := range ts {
				if tk.State != status.Done || tk.Started.IsZero() {
					t.Fatalf("task %s (%s): state %s, started %v", tk.ID, tk.Name, tk.State, tk.Started)
				}
			}
			slices.SortFunc(ts, func(a, b status.Task) int { return a.Started.Compare(b.Started) })
			var got []string
			for _, tk := range ts {
				got = append(got, tk.Name)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s master ran the tasks in the order %v, want the command line's %v", policy, got, want)
			}
		})
	}
}
