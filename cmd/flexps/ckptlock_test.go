package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/checkpoint"
)

// A flexps run whose checkpoint dir another process writes into (another
// flexps run, or a master: here the test process holds the dir's lock)
// fails before it starts a cluster, exit 1, naming the dir and the pid
// holding it; before, it ran, and the two overwrote and pruned each
// other's checkpoints.
func TestRunOnACheckpointDirInUseFailsEarly(t *testing.T) {
	dir := t.TempDir()
	ckdir := filepath.Join(dir, "ck")
	if err := os.Mkdir(ckdir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Something to resume (only its name is looked at before the lock).
	if err := os.WriteFile(filepath.Join(ckdir, checkpoint.Name(1)), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	train, test := filepath.Join(dir, "train.libsvm"), filepath.Join(dir, "test.libsvm")
	for _, p := range []string{train, test} {
		if err := os.WriteFile(p, []byte("1 1:1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	job := ckJob(t, dir, "held", train, test, filepath.Join(dir, "m.model"), 2, "1 epochs", ckdir)
	l, err := checkpoint.LockDir(ckdir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	pid := fmt.Sprintf("pid %d", os.Getpid())
	for _, tc := range []struct {
		name string
		argv []string
	}{
		{"a job", []string{"run", job}},
		{"a resume", []string{"run", "--resume", ckdir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, stderr, code := runFlexps(t, tc.argv...)
			if code != 1 || !strings.Contains(stderr, "checkpoint dir "+ckdir) || !strings.Contains(stderr, pid) || !strings.Contains(stderr, "in use by another flexps process") {
				t.Fatalf("exit %d, stderr %q; want 1 naming %s and %s", code, stderr, ckdir, pid)
			}
			if strings.Contains(stderr, "slave") {
				t.Errorf("a cluster was started: %q", stderr)
			}
			t.Logf("refused in %v: %s", time.Since(start), strings.TrimSpace(stderr))
		})
	}
}
