package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
)

// TestEveryCopyOfAShardDiesFailsTheTaskAtOnce: on real processes, both
// slaves holding the copies of one shard of a replicated table are killed
// at once while the task's workers (all on the third slave) never touch
// that shard. The task must fail promptly, naming the table and shard
// (the slave that became the shard's head reports it), not train to its
// end and fail only when its output reads the shard.
func TestEveryCopyOfAShardDiesFailsTheTaskAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 3, Slots: 2, DeadAfter: "1s"})
	const epochs = 400
	job := lrJob(t, dir, "lost", train, test, filepath.Join(dir, "m.model"), 300, 2, epochs, "ssp")
	data, err := os.ReadFile(job)
	if err != nil {
		t.Fatal(err)
	}
	// 3000 keys over 3 shards of 1000: the data's features (< 300) are
	// all in shard 0; shard 1 lives on slave-1 and slave-2.
	s := strings.Replace(string(data), "size = 300\n", "size = 3000\nreplicas = 2\n", 1)
	s = strings.Replace(s, "workers = 2\n", "workers = 2\nslaves = [\"slave-0\"]\n", 1)
	if !strings.Contains(s, "replicas = 2") || !strings.Contains(s, "slave-0") {
		t.Fatalf("job not rewritten:\n%s", s)
	}
	if err := os.WriteFile(job, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan clustertest.Result, 1)
	go func() { done <- c.Run(3*time.Minute, "submit", job) }()
	// Kill both once the stage runs.
	cl := c.Client()
	for running := false; !running; time.Sleep(20 * time.Millisecond) {
		rep, err := cl.Status(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range rep.Tasks {
			running = running || tk.Progress.Samples > 0
		}
		select {
		case r := <-done:
			t.Fatalf("the task ended before the kills (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
		default:
		}
	}
	c.Slaves[1].Kill()
	c.Slaves[2].Kill()
	r := <-done
	all := r.Stdout + r.Stderr
	if r.Exit == 0 {
		t.Fatalf("the task succeeded although every copy of a shard died:\n%s", all)
	}
	for _, want := range []string{"every replica of a shard died", `table "w" shard 1`, "reported by slave slave-0"} {
		if !strings.Contains(all, want) {
			t.Errorf("submit output does not say %q:\n%s", want, all)
		}
	}
	if rows := epochRows(r.Stdout); len(rows) >= epochs {
		t.Errorf("the task trained all %d epochs before failing", len(rows))
	}
}
