package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/status"
)

// TestSeparateWorkingDirectories runs a master and two slaves as separate
// OS processes, each in its own working directory as on separate machines,
// with a job whose paths are relative: the master and every slave resolve
// data/train.libsvm in their own directory (each has a copy, as with data
// copied to every machine), and the master writes the model in its own.
func TestSeparateWorkingDirectories(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	src := t.TempDir()
	train, test := lrData(t, src, 4000, 500)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, WorkDirs: true})
	for _, name := range []string{"master", "slave-0", "slave-1"} {
		dir := filepath.Join(c.WorkDir(name), "data")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for from, to := range map[string]string{train: "train.libsvm", test: "test.libsvm"} {
			b, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, to), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	job := lrJob(t, src, "wd", "data/train.libsvm", "data/test.libsvm", "out/wd.model", 500, 4, 2, "bsp")
	metrics := filepath.Join(src, "wd.jsonl")
	// Flags after the job file, as cobra allows.
	r := c.Run(3*time.Minute, "submit", job, "--metrics-out", metrics)
	if r.Exit != 0 {
		t.Fatalf("submit failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "test_acc") || !strings.Contains(r.Stdout, ": done") {
		t.Fatalf("submit output:\n%s", r.Stdout)
	}
	model := filepath.Join(c.WorkDir("master"), "out", "wd.model")
	fi, err := os.Stat(model)
	if err != nil {
		t.Fatalf("the master did not write the model in its working directory: %v", err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("model mode %v, want 0644", fi.Mode().Perm())
	}
	if a := accuracy(t, model, test); a < 0.7 {
		t.Fatalf("test accuracy %.4f", a)
	}
	b, err := os.ReadFile(metrics)
	if err != nil || strings.Count(string(b), `"type":"epoch"`) != 2 {
		t.Fatalf("metrics file: %v\n%s", err, b)
	}
	rep, err := c.Client().Status(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tasks) != 1 || rep.Tasks[0].State != status.Done || len(rep.Tasks[0].Results[0].Placement) != 2 {
		t.Fatalf("status: %+v", rep.Tasks)
	}
}
