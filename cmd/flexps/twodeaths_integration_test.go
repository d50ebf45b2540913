package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
)

// TestTwoSlavesKilledInARowWithThreeReplicas: on real processes, two
// slaves of four are killed (kill -9) 300 ms apart mid-stage while the
// task's table has replicas = 3, so a copy of every shard outlives both.
// The task must finish with both deaths reported as failovers. Before,
// the first death's finish_ranks went to the second victim, dead but not
// yet declared; its "no responders" failed the task ("slave slave-2
// could not count out the workers ... of a dead slave").
func TestTwoSlavesKilledInARowWithThreeReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 4000, 300)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 4, Slots: 1, DeadAfter: "1s"})
	output := filepath.Join(dir, "m.model")
	job := lrJob(t, dir, "two", train, test, output, 300, 4, 60, "ssp")
	data, err := os.ReadFile(job)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "dtype = \"float32\"\n", "dtype = \"float32\"\nreplicas = 3\n", 1)
	if s == string(data) {
		t.Fatalf("%s: no table to replicate", job)
	}
	if err := os.WriteFile(job, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan clustertest.Result, 1)
	go func() { done <- c.Run(4*time.Minute, "submit", job) }()
	waitUntil(t, "the stage's second epoch", 2*time.Minute, runningAt(c.Client(), 0, 2))
	c.Slaves[1].Kill()
	time.Sleep(300 * time.Millisecond)
	c.Slaves[2].Kill()
	r := <-done
	all := r.Stdout + r.Stderr
	if r.Exit != 0 {
		t.Fatalf("the task failed although a copy of every shard outlived both deaths (%d):\n%s", r.Exit, all)
	}
	for _, want := range []string{"slave slave-1 died", "slave slave-2 died"} {
		if !strings.Contains(all, want) {
			t.Errorf("submit output does not say %q:\n%s", want, all)
		}
	}
	if a := accuracy(t, output, test); a < 0.7 {
		t.Errorf("model accuracy %.3f after two deaths", a)
	}
}
