package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
)

// TestSlaveKilledDuringOutputWrite: on a cluster of real processes, a
// slave holding shards of an unreplicated table is killed (kill -9) while
// the master writes the task's output, a window at a time as it reads the
// shards. The task fails saying which slave died and what to set (not
// with the "context canceled" of the read its stop cut short), leaves no
// output and no temporary file, and the checkpoint written after the last
// stage is intact: `submit --resume` writes the output from it.
func TestSlaveKilledDuringOutputWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, DeadAfter: "1s"})
	outDir := filepath.Join(dir, "out")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ckdir, output := filepath.Join(dir, "ck"), filepath.Join(outDir, "m.model")
	job := unreplicated(t, ckJob(t, dir, "outkill", train, test, output, 2, "1 epoch", ckdir))
	// A table large enough that writing the output takes a while (the
	// data's features are all below 300; the rest stays zero).
	data, err := os.ReadFile(job)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Replace(string(data), "size = 500\n", "size = 1500000\n", 1)
	if big == string(data) {
		t.Fatalf("%s: no table size to grow", job)
	}
	if err := os.WriteFile(job, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}

	done := make(chan clustertest.Result, 1)
	go func() { done <- c.Run(3*time.Minute, "submit", job) }()
	deadline := time.Now().Add(3 * time.Minute)
	for killed := false; !killed; {
		for _, name := range lsDir(t, outDir) {
			if strings.HasPrefix(name, ".m.model.tmp") {
				c.Slaves[1].Kill()
				killed = true
			}
		}
		select {
		case r := <-done:
			if !killed {
				t.Fatalf("task ended before its output was written (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
			}
			done <- r
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no output written within 3 minutes")
		}
	}
	r := <-done
	all := r.Stdout + r.Stderr
	if r.Exit == 0 {
		t.Fatalf("the task succeeded although a slave holding an unreplicated table died while its output was written:\n%s", all)
	}
	for _, want := range []string{"slave slave-1", "died", "replicas = 1", "the output " + output + " was not written"} {
		if !strings.Contains(all, want) {
			t.Errorf("submit output does not say %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "context canceled") {
		t.Errorf("submit output blames a cancelled read, not the death:\n%s", all)
	}
	if names := lsDir(t, outDir); len(names) != 0 {
		t.Errorf("output directory after the failed write: %v (want it empty)", names)
	}

	// The checkpoint after the last stage holds the trained model: resume
	// it once the master declared the slave dead (else the resumed task
	// would place tables on it).
	waitDeclaredDead(t, c.Client(), "slave-1", deadline)
	r = c.Run(3*time.Minute, "submit", "--resume", ckdir)
	if r.Exit != 0 {
		t.Fatalf("submit --resume failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	if rows := epochRows(r.Stdout); len(rows) != 0 {
		t.Errorf("the resume trained epochs %v; the checkpoint was taken after the last stage", rows)
	}
	if a := accuracy(t, output, test); a < 0.7 {
		t.Fatalf("resumed model's accuracy %.3f", a)
	}
}
