package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/internal/testkit"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// TestDrill1KilledSlaveLosesNothing is drill 1 of "nothing lost when a
// node dies": a master and three slave processes, tables with replicas =
// 2; one slave is killed with SIGKILL in the middle of a stage. The task
// completes; every acknowledged Add to a counter table is in it (and at
// most the killed workers' one unacknowledged Add each besides); an LR run
// with a kill ends within 1% of the undisturbed run's test loss.
func TestDrill1KilledSlaveLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 30000, 1000)
	command, env := cli()

	t.Run("exact sums", func(t *testing.T) {
		c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 3, Slots: 2, Heartbeat: "100ms", DeadAfter: "600ms"})
		logs := filepath.Join(dir, "acked")
		if err := os.MkdirAll(logs, 0o755); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "counter.model")
		const batch = 7
		job := filepath.Join(dir, "counter.toml")
		spec := fmt.Sprintf(`name = "counter"
output = %q
[[table]]
name = "counter"
size = 4
replicas = 2
[input.train]
path = %q
block_size = 16384
[[stage]]
name = "count"
func = %q
workers = 6
consistency = "ssp"
staleness = 2
[stage.params]
epochs = 6
batch = %d
log_dir = %q
`, out, train, testkit.AckedCounter, batch, logs)
		if err := os.WriteFile(job, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		cl := c.Client()
		done := make(chan clustertest.Result, 1)
		go func() { done <- c.Run(3*time.Minute, "submit", job) }()
		waitUntil(t, "the stage running", time.Minute, func() bool {
			rep, err := cl.Status(context.Background(), "")
			return err == nil && len(rep.Tasks) == 1 && rep.Tasks[0].State == status.Running && rep.Tasks[0].Progress.Samples > 2000
		})
		c.Slaves[1].Kill()
		r := <-done
		if r.Exit != 0 {
			t.Fatalf("the task did not survive the kill (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
		}
		victim := c.Slaves[1].Cmd.Process.Pid
		lo, slack := 0.0, 0.0
		files, _ := filepath.Glob(filepath.Join(logs, "*.acked"))
		killed := 0
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Fields(string(b))
			if len(lines) == 0 {
				continue
			}
			v, err := strconv.ParseFloat(lines[len(lines)-1], 64)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			lo += v
			if strings.HasSuffix(f, fmt.Sprintf("-%d.acked", victim)) {
				killed++
				slack += batch // its Add in flight may have been applied
			}
		}
		if killed == 0 {
			t.Fatalf("no worker of the killed slave (pid %d) logged an acknowledged Add: the kill came too early or too late (%v)", victim, files)
		}
		m, err := tasks.LoadModel(out)
		if err != nil {
			t.Fatal(err)
		}
		got := m.Tables[0].Vals[0]
		t.Logf("counter %v; acknowledged %v (+ at most %v in flight on the killed slave's %d workers)", got, lo, slack, killed)
		if got < lo || got > lo+slack {
			t.Fatalf("counter = %v, want in [%v, %v]: an acknowledged Add was lost or one was applied twice", got, lo, lo+slack)
		}
		// Not just "slave-1": the placement column names every slave.
		if !strings.Contains(r.Stdout, "slave slave-1 died") {
			t.Fatalf("the run does not say which slave died:\n%s", r.Stdout)
		}
	})

	t.Run("LR loss", func(t *testing.T) {
		loss := func(kill bool) float64 {
			c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 3, Slots: 2, Heartbeat: "100ms", DeadAfter: "600ms"})
			defer c.Stop()
			name := "calm"
			if kill {
				name = "killed"
			}
			out := filepath.Join(dir, name+".model")
			job := lrJob(t, dir, name, train, test, out, 1000, 6, 8, "bsp")
			cl := c.Client()
			done := make(chan clustertest.Result, 1)
			go func() { done <- c.Run(3*time.Minute, "submit", job) }()
			if kill {
				waitUntil(t, "LR in its second epoch", time.Minute, runningAt(cl, -1, 1))
				c.Slaves[2].Kill()
			}
			r := <-done
			if r.Exit != 0 {
				t.Fatalf("%s run failed (%d):\n%s\n%s", name, r.Exit, r.Stdout, r.Stderr)
			}
			ev, err := tasks.Evaluate(context.Background(), out, test, "", "")
			if err != nil {
				t.Fatal(err)
			}
			return ev.Metrics["logloss"]
		}
		calm, killed := loss(false), loss(true)
		t.Logf("test logloss: undisturbed %.5f, slave killed %.5f", calm, killed)
		if math.Abs(killed-calm) > 0.01*calm {
			t.Fatalf("test logloss %.5f after a kill, %.5f undisturbed: more than 1%% apart", killed, calm)
		}
	})
}
