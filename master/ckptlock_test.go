package master

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/flexps/flexps/checkpoint"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// A local checkpoint dir another process writes into (another flexps run
// or master: here a lock the test holds, which flock tells apart from the
// master's as it would another process's) is refused at submission,
// naming the dir and the holder's pid; before, the two overwrote and
// pruned each other's checkpoints. The master holds the dir while its
// task runs and frees it when the task ends.
func TestCheckpointDirOfAnotherProcessIsRefused(t *testing.T) {
	h := newHarness(t, "sequential")
	s := h.slave("s1", 2, nil)
	dir := t.TempDir()
	withDir := func(name, d string) *tasks.MultiStageTask {
		task := oneStage(name, 1, nil)
		task.Checkpoint = tasks.Checkpoint{Dir: d, Every: "1 epochs"}
		return task
	}
	other, err := checkpoint.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	pid := fmt.Sprintf("pid %d", os.Getpid())
	for _, d := range []string{dir, dir + "/", "file://" + dir} {
		_, err := h.m.Submit(context.Background(), withDir("second", d))
		if !errors.Is(err, checkpoint.ErrLocked) || !strings.Contains(err.Error(), "checkpoint dir "+d) || !strings.Contains(err.Error(), pid) {
			t.Fatalf("dir %q held by another process: %v, want it named with %s", d, err, pid)
		}
	}
	other.Unlock()
	id := h.submit(withDir("first", dir))
	h.started(s)
	h.wait(id, "running", inState(status.Running))
	if l, err := checkpoint.LockDir(dir); !errors.Is(err, checkpoint.ErrLocked) {
		l.Unlock()
		t.Fatalf("while the task runs, another process takes the dir: %v", err)
	}
	h.cancel(id)
	h.wait(id, "cancelled", inState(status.Cancelled))
	l, err := checkpoint.LockDir(dir)
	if err != nil {
		t.Fatalf("after the task ended: %v", err)
	}
	l.Unlock()
}

// A master killed while it wrote a checkpoint leaves its temporary file
// in the dir (".ckpt-000003.flexps.tmp77"), there for good until now; the
// next task to take the dir's lock removes such files, and nothing else.
func TestLockedCheckpointDirLosesDeadWritersTemps(t *testing.T) {
	h := newHarness(t, "sequential")
	s := h.slave("s1", 2, nil)
	dir := t.TempDir()
	stale := dir + "/." + checkpoint.Name(3) + ".tmp77"
	keep := []string{dir + "/.other.model.tmp1", dir + "/" + checkpoint.Name(2), dir + "/notes.tmp"}
	for _, p := range append([]string{stale}, keep...) {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	task := oneStage("t", 1, nil)
	task.Checkpoint = tasks.Checkpoint{Dir: dir, Every: "1 epochs"}
	id := h.submit(task)
	h.started(s)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("the dead writer's temporary checkpoint %s is still there (%v)", stale, err)
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s was removed: %v", p, err)
		}
	}
	h.cancel(id)
	h.wait(id, "cancelled", inState(status.Cancelled))
}
