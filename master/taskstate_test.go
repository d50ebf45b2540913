package master

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/checkpoint"
	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

func TestTaskRecordsRoundTripAndRefuseStrangers(t *testing.T) {
	dir := t.TempDir()
	m := &Master{cfg: Config{StateDir: dir}, log: zerolog.Nop()}
	spec := tasks.NewTask("lr")
	spec.ID = "t1"
	spec.Checkpoint = tasks.Checkpoint{Dir: "/ck"}
	tr := &taskRun{m: m, spec: spec, ckpt: &checkpointer{dir: "/ck"}}
	tr.status.Submitted = time.Unix(100, 0)
	if err := tr.persist(); err != nil {
		t.Fatal(err)
	}
	older := *spec
	older.ID = "t0"
	if err := writeFileAtomic(m.recordPath("t0"), []byte(`{"task":{"id":"t0","name":"lr","checkpoint":{"dir":"/ck0"}},"submitted":"1970-01-01T00:00:50Z"}`)); err != nil {
		t.Fatal(err)
	}
	// A record under another task's name, one without checkpoints, a
	// torn one, and a temporary file of an interrupted write.
	for name, body := range map[string]string{
		"t2.json":         `{"task":{"id":"t9","name":"x","checkpoint":{"dir":"/c"}}}`,
		"t3.json":         `{"task":{"id":"t3","name":"x"}}`,
		"t4.json":         `{"task":{"id":`,
		".t5.json.tmp123": `{}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, "tasks", name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	recs, errs := m.readRecords()
	if len(recs) != 2 || recs[0].Task.ID != "t0" || recs[1].Task.ID != "t1" || recs[1].Task.Checkpoint.Dir != "/ck" {
		t.Fatalf("records %+v", recs)
	}
	if len(errs) != 3 {
		t.Fatalf("errors %v, want 3", errs)
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), filepath.Join(dir, "tasks")) {
			t.Fatalf("error %q does not name the file", err)
		}
	}
	tr.unpersist()
	if _, err := os.Stat(m.recordPath("t1")); !os.IsNotExist(err) {
		t.Fatalf("record still there: %v", err)
	}
	// Tasks without checkpoints, or a master without a state dir, keep
	// no record.
	tr.ckpt = nil
	if err := tr.persist(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.recordPath("t1")); !os.IsNotExist(err) {
		t.Fatal("a task without checkpoints was recorded")
	}
}

// A restarted master resumes a recorded task from the checkpoints in its
// dir only when they are its own, or when it was itself resumed from
// them. A task submitted from its job that had written none yet starts
// from the beginning: the checkpoints of an earlier task in the same dir
// (the same job run before, the dir reused) are not its progress. It was
// resumed from them, that task's spec and epochs under its id: from a
// finished task's last checkpoint, "done" at once with that task's model
// and without its own output.
func TestRestartResumesOnlyATasksOwnCheckpoints(t *testing.T) {
	const earlier, id = "t-earlier", "t-mine"
	for _, tc := range []struct {
		name      string
		ckptOf    string // the task id the checkpoint in the dir records
		resumed   bool   // the record's task was resumed from a checkpoint
		newer     bool   // the earlier task wrote a newer checkpoint after it (epoch 4)
		wantStage string // the stage the restarted master starts
		wantEpoch int
	}{
		{"an earlier task's checkpoint", earlier, false, false, "mine", 0},
		{"its own checkpoint", id, false, false, "earlier", 2},
		{"resumed from the earlier task's, none of its own yet", earlier, true, false, "earlier", 2},
		// flexps run --resume DIR/ckpt-000001.flexps: the one it was
		// resumed from, not the newest in the dir.
		{"resumed from an older one of the earlier task's", earlier, true, true, "earlier", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, ckdir := t.TempDir(), t.TempDir()
			task := func(id, stage string) *tasks.MultiStageTask {
				spec := tasks.NewTask("lr").SetStages(tasks.Stage{Name: stage, Func: "test.none", Workers: 1})
				spec.ID, spec.Checkpoint = id, tasks.Checkpoint{Dir: ckdir}
				spec.Normalize()
				return spec
			}
			// The checkpoint (its stage named "earlier") after 2 epochs.
			ck := &checkpoint.Checkpoint{Record: checkpoint.Record{Task: *task(tc.ckptOf, "earlier"), Progress: checkpoint.Progress{Epoch: 2}}}
			w, err := checkpoint.Write(context.Background(), datastore.NewSources(), ckdir, ck, 2, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if tc.newer {
				ck := &checkpoint.Checkpoint{Record: checkpoint.Record{Task: *task(tc.ckptOf, "earlier"), Progress: checkpoint.Progress{Epoch: 4}}}
				if _, err := checkpoint.Write(context.Background(), datastore.NewSources(), ckdir, ck, 2, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			rec := taskRecord{Task: *task(id, "mine"), Submitted: time.Unix(100, 0)}
			if tc.resumed {
				rec.Resumed = w.Path
			}
			data, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			if err := writeFileAtomic(filepath.Join(state, "tasks", id+".json"), data); err != nil {
				t.Fatal(err)
			}
			h := newHarnessWith(t, "sequential", bus.EmbeddedOptions{}, func(c *Config) {
				c.StateDir, c.DeadAfter = state, 100*time.Millisecond
			})
			s := h.slave("s1", 1, nil)
			start := h.started(s)
			if start.Task != id || start.Spec.Stages[0].Name != tc.wantStage || start.StartEpoch != tc.wantEpoch {
				t.Fatalf("the restarted master started task %s stage %q at epoch %d, want %s stage %q at epoch %d",
					start.Task, start.Spec.Stages[0].Name, start.StartEpoch, id, tc.wantStage, tc.wantEpoch)
			}
			st, err := h.m.Status(id)
			if err != nil {
				t.Fatal(err)
			}
			if resumed := st.Tasks[0].Resumed != ""; resumed != (tc.wantEpoch > 0) {
				t.Fatalf("task resumed from %q", st.Tasks[0].Resumed)
			}
		})
	}
}

// A resumed task's checkpoints record the tasks it continues (lineage):
// theirs in the dir are its own, pruned with its own by keep; any other
// task's are left. Resumed under its own id (a master restart from its
// own checkpoint), the lineage is the one its checkpoint recorded.
func TestResumedTaskContinuesTheLineageOfItsCheckpoint(t *testing.T) {
	const writer = "t-earlier"
	for _, tc := range []struct {
		name    string
		lineage []string // the checkpoint's
		id      string   // resumed under ("": a new id)
		want    []string
	}{
		{"a job's task resumed", nil, "", []string{writer}},
		{"a resumed task resumed", []string{"t-first"}, "", []string{"t-first", writer}},
		{"its own, after a master restart", []string{"t-first"}, writer, []string{"t-first"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ckdir := t.TempDir()
			spec := tasks.NewTask("lr").SetStages(tasks.Stage{Name: "s", Func: "test.none", Workers: 1})
			spec.ID, spec.Checkpoint = writer, tasks.Checkpoint{Dir: ckdir}
			spec.Normalize()
			ck := &checkpoint.Checkpoint{Record: checkpoint.Record{Task: *spec, Lineage: tc.lineage}}
			if _, err := checkpoint.Write(context.Background(), datastore.NewSources(), ckdir, ck, 2, time.Now()); err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, "sequential")
			id, _, err := h.m.Resume(context.Background(), ckdir, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			h.m.mu.Lock()
			got := h.m.tasks[id].ckpt.lineage
			h.m.mu.Unlock()
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("task %s continues %v, want %v", id, got, tc.want)
			}
		})
	}
}

// Resume takes one checkpoint file as well as a dir: that checkpoint is
// resumed, not the newest in its dir, and the task's checkpoints go on in
// the file's dir. Before, --resume took only a dir, and a user could not
// go back to an earlier epoch (the model diverged after it) or resume
// another task's checkpoints left in the dir without moving files.
func TestResumeFromOneCheckpointFile(t *testing.T) {
	ckdir := t.TempDir()
	spec := tasks.NewTask("lr").SetStages(tasks.Stage{Name: "s", Func: "test.none", Workers: 1})
	spec.ID, spec.Checkpoint = "t-earlier", tasks.Checkpoint{Dir: ckdir}
	spec.Normalize()
	var paths []string
	for _, epoch := range []int{2, 4} {
		ck := &checkpoint.Checkpoint{Record: checkpoint.Record{Task: *spec, Progress: checkpoint.Progress{Epoch: epoch}}}
		w, err := checkpoint.Write(context.Background(), datastore.NewSources(), ckdir, ck, 2, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, w.Path)
	}
	for _, tc := range []struct {
		name      string
		resume    string
		wantEpoch int
		wantErr   string
	}{
		{"the dir: the newest", ckdir, 4, ""},
		{"the older file", paths[0], 2, ""},
		{"the newest file", paths[1], 4, ""},
		{"a file not there", filepath.Join(ckdir, checkpoint.Name(7)), 0, checkpoint.Name(7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "sequential")
			s := h.slave("s1", 1, nil)
			id, _, err := h.m.Resume(context.Background(), tc.resume, "")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resume(%s): %v, want an error naming %s", tc.resume, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if start := h.started(s); start.Task != id || start.StartEpoch != tc.wantEpoch {
				t.Fatalf("started task %s at epoch %d, want %s at epoch %d", start.Task, start.StartEpoch, id, tc.wantEpoch)
			}
			h.m.mu.Lock()
			dir := h.m.tasks[id].spec.Checkpoint.Dir
			h.m.mu.Unlock()
			if dir != ckdir {
				t.Fatalf("the resumed task writes its checkpoints to %s, want %s", dir, ckdir)
			}
		})
	}
}

// A master killed while it wrote a task's model leaves the temporary file
// beside the output (".m.model.tmp123"); the restarted master that
// resumes the task removes it, and nothing else there. Before, it stayed
// for ever (by hand: kill -9 of the master mid-write of a 96 MB model,
// the resumed task wrote the model, the temporary file stayed).
func TestRestartRemovesTheDeadMastersTemporaryOutput(t *testing.T) {
	state, ckdir, outdir := t.TempDir(), t.TempDir(), t.TempDir()
	spec := tasks.NewTask("lr").SetStages(tasks.Stage{Name: "s", Func: "test.none", Workers: 1})
	spec.ID, spec.Checkpoint, spec.Output = "t1", tasks.Checkpoint{Dir: ckdir}, filepath.Join(outdir, "m.model")
	spec.Normalize()
	stale, keep := filepath.Join(outdir, ".m.model.tmp123"), []string{filepath.Join(outdir, ".other.model.tmp9"), filepath.Join(outdir, "m.model.tmp1")}
	for _, p := range append([]string{stale}, keep...) {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := json.Marshal(taskRecord{Task: *spec, Submitted: time.Unix(100, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(filepath.Join(state, "tasks", "t1.json"), data); err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, "sequential", bus.EmbeddedOptions{}, func(c *Config) {
		c.StateDir, c.DeadAfter = state, 100*time.Millisecond
	})
	s := h.slave("s1", 1, nil)
	if start := h.started(s); start.Task != "t1" {
		t.Fatalf("the restarted master started task %s, want t1", start.Task)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("the dead master's temporary output %s is still there (%v)", stale, err)
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s was removed: %v", p, err)
		}
	}
}
