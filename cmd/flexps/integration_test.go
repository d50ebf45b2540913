package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// lrData writes a small generated train/test pair.
func lrData(t *testing.T, dir string, rows, dim int) (train, test string) {
	t.Helper()
	train, test = filepath.Join(dir, "train.libsvm"), filepath.Join(dir, "test.libsvm")
	err := synth.Generate(train, synth.Spec{Kind: "libsvm", Rows: rows, Dim: dim, NNZ: 10, Zipf: 1.1, Noise: 0.01, Seed: 7,
		TestPath: test, TestRows: rows / 5})
	if err != nil {
		t.Fatal(err)
	}
	return train, test
}

// ratingsData writes a generated train/test pair of rank-3 ratings by 600
// users of 300 items (2,000 test ratings).
func ratingsData(t *testing.T, dir string, rows int) (train, test string) {
	t.Helper()
	train, test = filepath.Join(dir, "train.tsv"), filepath.Join(dir, "test.tsv")
	err := synth.Generate(train, synth.Spec{Kind: "ratings", Users: 600, Items: 300, Rank: 3, Rows: rows, Noise: 0.3, Seed: 5,
		TestPath: test, TestRows: 2000})
	if err != nil {
		t.Fatal(err)
	}
	return train, test
}

func lrJob(t *testing.T, dir, name, train, test, output string, dim, workers, epochs int, consistency string) string {
	t.Helper()
	job := fmt.Sprintf(`name = %q
kind = "lr"
output = %q
[local]
slaves = 2
slots = 2
[[table]]
name = "w"
size = %d
dtype = "float32"
[input.train]
path = %q
block_size = 65536
[input.test]
path = %q
[[stage]]
name = "sgd"
func = "lr.sgd"
workers = %d
consistency = %q
[stage.params]
epochs = %d
batch = 50
lr = 0.5
`, name, output, dim, train, test, workers, consistency, epochs)
	path := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(path, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func accuracy(t *testing.T, model, data string) float64 {
	t.Helper()
	ev, err := tasks.Evaluate(context.Background(), model, data, "", "")
	if err != nil {
		t.Fatal(err)
	}
	a, ok := ev.Metrics["accuracy"]
	if !ok {
		t.Fatalf("no accuracy in %v", ev)
	}
	return a
}

// unreplicated rewrites an lrJob file so its table keeps one copy: a
// slave's death then fails the task (the path without failover).
func unreplicated(t *testing.T, job string) string {
	t.Helper()
	data, err := os.ReadFile(job)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "dtype = \"float32\"\n", "dtype = \"float32\"\nreplicas = 1\n", 1)
	if s == string(data) {
		t.Fatalf("%s: no table to make unreplicated", job)
	}
	if err := os.WriteFile(job, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return job
}

func TestClusterLRMatchesLocalMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 12000, 2000)
	command, env := cli()

	localModel := filepath.Join(dir, "local.model")
	localJob := lrJob(t, dir, "local", train, test, localModel, 2000, 4, 3, "bsp")
	r := clustertest.RunCLI(t, command, env, 3*time.Minute, "run", "--log-level", "warn", localJob)
	if r.Exit != 0 {
		t.Fatalf("flexps run failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}

	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2})
	clusterModel := filepath.Join(dir, "cluster.model")
	clusterJob := lrJob(t, dir, "cluster", train, test, clusterModel, 2000, 4, 3, "bsp")
	r = c.Run(3*time.Minute, "submit", clusterJob)
	if r.Exit != 0 {
		t.Fatalf("flexps submit failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "done") || !strings.Contains(r.Stdout, "test_acc") {
		t.Fatalf("submit output lacks the summary:\n%s", r.Stdout)
	}
	la, ca := accuracy(t, localModel, test), accuracy(t, clusterModel, test)
	t.Logf("test accuracy: local %.4f, cluster %.4f", la, ca)
	if la < 0.75 || ca < 0.75 {
		t.Fatalf("accuracy too low: local %.4f cluster %.4f", la, ca)
	}
	if d := la - ca; d > 0.02 || d < -0.02 {
		t.Fatalf("cluster accuracy %.4f differs from local %.4f by more than 2 points", ca, la)
	}
	// Both slaves hosted shards and ran workers.
	st := c.Client()
	rep, err := st.Status(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tasks) != 1 || rep.Tasks[0].State != status.Done || len(rep.Tasks[0].Results[0].Placement) != 2 {
		t.Fatalf("status after the run: %+v", rep.Tasks)
	}
}

func TestSlaveDeathFailsTaskWithinTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 6000, 1000)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, DeadAfter: "1500ms"})
	job := unreplicated(t, lrJob(t, dir, "long", train, test, "", 1000, 4, 100000, "ssp"))
	// ssp needs a staleness; rewrite the stage line.
	data, _ := os.ReadFile(job)
	os.WriteFile(job, []byte(strings.Replace(string(data), `consistency = "ssp"`, "consistency = \"ssp\"\nstaleness = 1", 1)), 0o644)

	done := make(chan clustertest.Result, 1)
	go func() { done <- c.Run(2*time.Minute, "submit", job) }()
	cl := c.Client()
	deadline := time.Now().Add(time.Minute)
	for {
		rep, err := cl.Status(context.Background(), "")
		if err == nil && len(rep.Tasks) == 1 && rep.Tasks[0].State == status.Running && rep.Tasks[0].Progress.Samples > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task never started running: %+v %v", rep.Tasks, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	killed := time.Now()
	c.Slaves[1].Kill()
	var r clustertest.Result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("submit still running 30s after a slave died: the task hangs")
	}
	took := time.Since(killed)
	t.Logf("submit ended %v after the kill", took)
	if r.Exit == 0 {
		t.Fatalf("submit succeeded although a slave died:\n%s", r.Stdout)
	}
	out := r.Stdout + r.Stderr
	if !strings.Contains(out, "slave-1") || !strings.Contains(out, "died") {
		t.Fatalf("the error does not name the dead slave:\n%s", out)
	}
	if strings.Contains(out, "goroutine ") || strings.Contains(out, "panic") {
		t.Fatalf("stack trace in the output:\n%s", out)
	}
	// The survivor and the master keep working.
	if c.Slaves[0].Exited() || c.Master.Exited() {
		t.Fatal("a surviving process exited")
	}
	rep, err := cl.Status(context.Background(), "")
	if err != nil || rep.Tasks[0].State != status.Failed {
		t.Fatalf("status: %+v %v", rep.Tasks, err)
	}
}
