package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/checkpoint"
	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// ckJob is lrJob with a [checkpoint] table.
func ckJob(t *testing.T, dir, name, train, test, output string, epochs int, every, ckdir string) string {
	t.Helper()
	path := lrJob(t, dir, name, train, test, output, 500, 2, epochs, "bsp")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "[checkpoint]\nevery = %q\ndir = %q\n", every, ckdir); err != nil {
		t.Fatal(err)
	}
	return path
}

// runFlexps runs the CLI to its end and returns its output and exit code.
func runFlexps(t *testing.T, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	command, env := cli()
	cmd := exec.Command(command[0], append(command[1:], argv...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func logloss(t *testing.T, model, data string) float64 {
	t.Helper()
	ev, err := tasks.Evaluate(context.Background(), model, data, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return ev.Metrics["logloss"]
}

// epochRows are the epoch numbers of the epoch table a run printed.
func epochRows(out string) []int {
	eps, _ := epochLosses(out)
	return eps
}

// epochLosses are the epoch numbers and training log-losses of the epoch
// table a run printed.
func epochLosses(out string) ([]int, []float64) {
	var eps []int
	var losses []float64
	for _, m := range regexp.MustCompile(`(?m)^\s+0 sgd\s+(\d+)\s+([0-9.]+)\s`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		l, _ := strconv.ParseFloat(m[2], 64)
		eps, losses = append(eps, n), append(losses, l)
	}
	return eps, losses
}

// TestDrill4CtrlCCheckpointResume is drill 4 of "nothing lost when a node
// dies": Ctrl-C during flexps run writes a final checkpoint and prints the
// resume command; that command finishes the task from the saved epoch;
// the model is within noise of an undisturbed run of the same job.
func TestDrill4CtrlCCheckpointResume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 3000, 500)
	const epochs = 40
	ckdir := filepath.Join(dir, "ck")
	// No periodic checkpoint falls due: the one written is Ctrl-C's.
	job := ckJob(t, dir, "stopped", train, test, filepath.Join(dir, "stopped.model"), epochs, "1h", ckdir)

	stdout, stderr := interruptRun(t, job, 2*time.Minute)
	m := regexp.MustCompile(`resume with:\n\s+(flexps run --resume .*)\n`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no resume command printed:\n%s", stderr.String())
	}
	if want := "flexps run --resume " + ckdir + " --slaves 2 --slots 2"; m[1] != want {
		t.Fatalf("resume command %q, want %q", m[1], want)
	}
	ck, path, skipped, err := checkpoint.Latest(context.Background(), datastore.NewSources(), ckdir)
	if err != nil || len(skipped) != 0 {
		t.Fatalf("checkpoint after Ctrl-C: %v (skipped %v)", err, skipped)
	}
	saved := ck.Progress.Epoch
	if ck.Progress.Stage != 0 || saved < 1 || saved >= epochs {
		t.Fatalf("checkpoint %s at stage %d epoch %d, want stage 0 and 1 <= epoch < %d", path, ck.Progress.Stage, saved, epochs)
	}
	if _, err := os.Stat(filepath.Join(dir, "stopped.model")); err == nil {
		t.Fatal("the interrupted run wrote its model")
	}

	// The printed command, run as printed (argv after "flexps").
	out, errOut, code := runFlexps(t, append(strings.Fields(m[1])[1:], "--log-level", "error")...)
	if code != 0 {
		t.Fatalf("resume exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "resumed from checkpoint "+path) {
		t.Fatalf("resumed run does not say where from:\n%s", out)
	}
	rows, losses := epochLosses(out)
	if len(rows) != epochs-saved || rows[0] != saved+1 || rows[len(rows)-1] != epochs {
		t.Fatalf("resumed run's epochs %v, want %d..%d", rows, saved+1, epochs)
	}
	// The tables came back: the first resumed epoch trains on the saved
	// model, not from zero (the first epoch from zero has a much higher
	// loss).
	_, before := epochLosses(stdout.String())
	if len(before) == 0 || losses[0] > before[0]-0.03 {
		t.Fatalf("resumed epoch %d's training loss %.4f, the interrupted run's first epoch %v: the model was not restored", saved+1, losses[0], before)
	}

	// The same job, undisturbed.
	plain := lrJob(t, dir, "plain", train, test, filepath.Join(dir, "plain.model"), 500, 2, epochs, "bsp")
	if out, errOut, code := runFlexps(t, "run", plain, "--log-level", "error"); code != 0 {
		t.Fatalf("undisturbed run exit %d\n%s\n%s", code, out, errOut)
	}
	resumed, undisturbed := logloss(t, filepath.Join(dir, "stopped.model"), test), logloss(t, filepath.Join(dir, "plain.model"), test)
	t.Logf("test logloss: resumed %.4f, undisturbed %.4f (checkpoint at epoch %d of %d)", resumed, undisturbed, saved, epochs)
	// Pulled blocks make every run's batch order differ: runs of this job
	// land within about 0.005 of each other.
	if math.Abs(resumed-undisturbed) > 0.02 {
		t.Fatalf("resumed model's test logloss %.4f, undisturbed %.4f: more than noise apart", resumed, undisturbed)
	}
}

// TestDrill5CorruptCheckpointFallsBack is drill 5: the newest checkpoint
// file is torn or corrupted; resume detects it by its checksum, warns
// naming the file, and resumes from the one before.
func TestDrill5CorruptCheckpointFallsBack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	for _, tc := range []struct {
		name  string
		spoil func(data []byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)*2/3] }},
		{"bit flipped", func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }},
		{"trailer cut", func(b []byte) []byte { return b[:len(b)-3] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ckdir := filepath.Join(t.TempDir(), "ck")
			output := filepath.Join(t.TempDir(), "m.model")
			// Checkpoints after epochs 1, 2 and 3, and after the stage
			// (its last epoch); two are kept.
			job := ckJob(t, dir, "drill5", train, test, output, 4, "1 epoch", ckdir)
			if out, errOut, code := runFlexps(t, "run", job, "--log-level", "error"); code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			newest, older := filepath.Join(ckdir, checkpoint.Name(4)), filepath.Join(ckdir, checkpoint.Name(3))
			data, err := os.ReadFile(newest)
			if err != nil {
				t.Fatalf("%v (files: %v)", err, lsDir(t, ckdir))
			}
			if _, err := os.Stat(filepath.Join(ckdir, checkpoint.Name(2))); err == nil {
				t.Fatalf("checkpoint 1 kept beyond keep = 2: %v", lsDir(t, ckdir))
			}
			if err := os.WriteFile(newest, tc.spoil(data), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := runFlexps(t, "run", "--resume", ckdir, "--log-level", "error")
			if code != 0 {
				t.Fatalf("resume exit %d\n%s\n%s", code, out, errOut)
			}
			if !strings.Contains(errOut, "warning: skipping checkpoint "+newest+":") {
				t.Fatalf("no warning naming %s:\n%s", newest, errOut)
			}
			if !strings.Contains(out, "resumed from checkpoint "+older) {
				t.Fatalf("not resumed from %s:\n%s", older, out)
			}
			if rows := epochRows(out); len(rows) != 1 || rows[0] != 4 {
				t.Fatalf("resumed epochs %v, want [4]", rows)
			}
			if _, err := os.Stat(output); err != nil {
				t.Fatalf("no model after the resumed run: %v", err)
			}
		})
	}
}

func lsDir(t *testing.T, dir string) []string {
	es, err := os.ReadDir(dir)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestSlaveDeathThenSubmitResume: on a cluster of real processes, a slave
// dies mid-task and the task fails; `flexps submit --resume DIR` on the
// same master continues it from its last checkpoint on the survivor and
// finishes it.
func TestSlaveDeathThenSubmitResume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 3000, 500)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, DeadAfter: "1500ms"})
	ckdir, output := filepath.Join(dir, "ck"), filepath.Join(dir, "m.model")
	const epochs = 80
	job := unreplicated(t, ckJob(t, dir, "killed", train, test, output, epochs, "1 epoch", ckdir))
	// Every slot of the cluster: the survivor has half of them, and the
	// resumed task runs on what it has (the checkpoint fixes the task,
	// so its user cannot lower workers; before, the resume failed with
	// "asks for 4 workers but the cluster has 2 worker slots").
	setWorkers(t, job, 4)

	done := make(chan clustertest.Result, 1)
	go func() { done <- c.Run(2*time.Minute, "submit", job) }()
	st := datastore.NewSources()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		paths, err := checkpoint.List(context.Background(), st, ckdir)
		if err == nil && len(paths) > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("task ended before its first checkpoint (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint within a minute")
		}
	}
	c.Slaves[1].Kill()
	r := <-done
	if r.Exit == 0 {
		t.Fatalf("the task finished although a slave died; make it longer:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stdout+r.Stderr, "died") {
		t.Fatalf("submit output does not say the slave died:\n%s\n%s", r.Stdout, r.Stderr)
	}
	// A worker's failed request may end the task before the master
	// declared the slave dead; resume once it has, or the new task would
	// place tables on it.
	waitDeclaredDead(t, c.Client(), "slave-1", deadline)
	ck, path, _, err := checkpoint.Latest(context.Background(), st, ckdir)
	if err != nil {
		t.Fatal(err)
	}
	r = c.Run(2*time.Minute, "submit", "--resume", ckdir)
	if r.Exit != 0 {
		t.Fatalf("submit --resume failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "resumed from checkpoint "+path) {
		t.Fatalf("not resumed from %s:\n%s", path, r.Stdout)
	}
	rows := epochRows(r.Stdout)
	if len(rows) == 0 || rows[0] != ck.Progress.Epoch+1 || rows[len(rows)-1] != epochs {
		t.Fatalf("resumed epochs %v, the checkpoint had %d of %d", rows, ck.Progress.Epoch, epochs)
	}
	if a := accuracy(t, output, test); a < 0.75 {
		t.Fatalf("resumed model's accuracy %.3f", a)
	}
	rep, err := c.Client().Status(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	last := rep.Tasks[len(rep.Tasks)-1].Results
	if res := last[len(last)-1]; res.Workers != 2 || !strings.Contains(res.Note, "runs 2 of its 4 workers: resumed from") {
		t.Fatalf("resumed stage: %d workers, note %q", res.Workers, res.Note)
	}
}

// setWorkers sets every stage's workers in job.
func setWorkers(t *testing.T, job string, n int) {
	t.Helper()
	data, err := os.ReadFile(job)
	if err != nil {
		t.Fatal(err)
	}
	s := regexp.MustCompile(`(?m)^workers = \d+$`).ReplaceAllString(string(data), fmt.Sprintf("workers = %d", n))
	if err := os.WriteFile(job, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestResumeAtStageBoundary: a checkpoint between two stages resumes at
// the second: the first is not run again (its result comes back from the
// checkpoint) and the second starts at its first epoch. The checkpoint
// after the last stage resumes to the output alone: a finished task is
// not trained again.
func TestResumeAtStageBoundary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	ckdir, output := filepath.Join(dir, "ck"), filepath.Join(dir, "m.model")
	stage := `[[stage]]
name = %q
func = "lr.sgd"
workers = 2
consistency = "bsp"
[stage.params]
epochs = 2
batch = 50
`
	job := filepath.Join(dir, "two.toml")
	writeFile := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(job, fmt.Sprintf(`name = "two"
kind = "lr"
output = %q
[[table]]
name = "w"
size = 300
[input.train]
path = %q
[input.test]
path = %q
[checkpoint]
every = "1 epoch"
dir = %q
keep = 3
`, output, train, test, ckdir)+fmt.Sprintf(stage, "first")+fmt.Sprintf(stage, "second"))
	if out, errOut, code := runFlexps(t, "run", job, "--log-level", "error"); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	// Checkpoints: 1 after epoch 1 of "first", 2 between the stages, 3
	// after epoch 1 of "second", 4 after "second"; 1 was deleted (keep 3).
	// Resuming the finished task runs no epoch and writes the same model.
	done, err := checkpoint.Load(context.Background(), datastore.NewSources(), filepath.Join(ckdir, checkpoint.Name(4)))
	if err != nil {
		t.Fatal(err)
	}
	if done.Progress.Stage != 2 || len(done.Progress.Results) != 2 {
		t.Fatalf("checkpoint 4's progress %+v", done.Progress)
	}
	before := accuracy(t, output, test)
	out, errOut, code := runFlexps(t, "run", "--resume", ckdir, "--log-level", "error")
	if code != 0 {
		t.Fatalf("resume of the finished task: exit %d\n%s\n%s", code, out, errOut)
	}
	if regexp.MustCompile(`(?m)^\s+\d+ \w+\s+\d+\s+[0-9.]+\s`).MatchString(out) || !strings.Contains(out, checkpoint.Name(4)) {
		t.Fatalf("resume of the finished task trained or did not start from checkpoint 4:\n%s", out)
	}
	if after := accuracy(t, output, test); after != before {
		t.Fatalf("accuracy %.4f after resuming the finished task, %.4f before", after, before)
	}
	// Spoil 3 and 4: resume falls back to the boundary, 2.
	boundary := filepath.Join(ckdir, checkpoint.Name(2))
	ck, err := checkpoint.Load(context.Background(), datastore.NewSources(), boundary)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Progress.Stage != 1 || ck.Progress.Epoch != 0 || len(ck.Progress.Results) != 1 || ck.Progress.Results[0].Name != "first" {
		t.Fatalf("checkpoint 2's progress %+v", ck.Progress)
	}
	writeFile(filepath.Join(ckdir, checkpoint.Name(3)), "torn")
	writeFile(filepath.Join(ckdir, checkpoint.Name(4)), "torn")
	out, errOut, code = runFlexps(t, "run", "--resume", ckdir, "--log-level", "error")
	if code != 0 {
		t.Fatalf("resume exit %d\n%s\n%s", code, out, errOut)
	}
	var ran []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(\d+ \w+)\s+(\d+)\s+[0-9.]+\s`).FindAllStringSubmatch(out, -1) {
		ran = append(ran, m[1]+" epoch "+m[2])
	}
	if want := []string{"1 second epoch 1", "1 second epoch 2"}; !slices.Equal(ran, want) {
		t.Fatalf("epochs run on resume %v, want %v\n%s", ran, want, out)
	}
	// The summary lists both stages: "first" from the checkpoint.
	if !regexp.MustCompile(`(?m)^\s+0 first\s+lr.sgd`).MatchString(out) || !regexp.MustCompile(`(?m)^\s+1 second\s+lr.sgd`).MatchString(out) {
		t.Fatalf("summary lacks a stage:\n%s", out)
	}
	if a := accuracy(t, output, test); a < 0.7 {
		t.Fatalf("accuracy %.3f", a)
	}
}

// TestDrill3MasterRestartResumesTask is drill 3: the master is killed
// (kill -9, its embedded NATS server with it) in the middle of a task
// with checkpoints and started again; the slaves rejoin, the new master
// finds the task in its state directory and resumes it from its last
// checkpoint under the same id, and the task finishes with its model.
func TestDrill3MasterRestartResumesTask(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 3000, 500)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, DeadAfter: "1500ms"})
	ckdir, output := filepath.Join(dir, "ck"), filepath.Join(dir, "m.model")
	const epochs = 60
	job := ckJob(t, dir, "restarted", train, test, output, epochs, "1 epoch", ckdir)
	r := c.Run(time.Minute, "submit", "--detach", job)
	if r.Exit != 0 {
		t.Fatalf("submit failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	st := datastore.NewSources()
	deadline := time.Now().Add(time.Minute)
	for {
		paths, err := checkpoint.List(context.Background(), st, ckdir)
		if err == nil && len(paths) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.RestartMaster()
	killedAt, _, _, err := checkpoint.Latest(context.Background(), st, ckdir)
	if err != nil {
		t.Fatal(err)
	}
	c.WaitSlaves(2, time.Minute)
	cl := c.Client()
	var task status.Task
	for deadline := time.Now().Add(2 * time.Minute); ; {
		rep, err := cl.Status(context.Background(), id)
		if err == nil && len(rep.Tasks) == 1 {
			task = rep.Tasks[0]
			if task.Ended() {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s not finished two minutes after the restart: %+v (%v)", id, task, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if task.State != status.Done || task.Resumed == "" {
		t.Fatalf("task after the restart: state %s, resumed from %q, reason %q", task.State, task.Resumed, task.Reason)
	}
	// The resumed-from file may be deleted since (keep 2): its name and
	// the epochs run tell where the task went on from.
	seq, ok := checkpoint.ParseName(task.Resumed)
	if !ok || seq < killedAt.Seq {
		t.Fatalf("resumed from %s, checkpoint %d existed at the restart", task.Resumed, killedAt.Seq)
	}
	epochsRun := task.Results[len(task.Results)-1].Epochs
	if len(epochsRun) == 0 || epochsRun[0].Epoch-1 < killedAt.Progress.Epoch || epochsRun[len(epochsRun)-1].Epoch != epochs {
		t.Fatalf("epochs after the restart %v, want from after epoch %d to %d", epochsRun, killedAt.Progress.Epoch, epochs)
	}
	t.Logf("master killed at checkpoint %d (epoch %d); resumed from %s, ran epochs %d..%d",
		killedAt.Seq, killedAt.Progress.Epoch, filepath.Base(task.Resumed), epochsRun[0].Epoch, epochs)
	if a := accuracy(t, output, test); a < 0.75 {
		t.Fatalf("accuracy %.3f", a)
	}
	// The record is gone: another restart resumes nothing.
	if recs, _ := filepath.Glob(filepath.Join(c.Dir, "state", "tasks", "*.json")); len(recs) != 0 {
		t.Fatalf("task records left after the task ended: %v", recs)
	}
}

// TestSubmitFollowsAcrossAMasterRestart: `flexps submit` following a task
// whose master is killed and started again goes on following it when the
// new master resumes it (a [checkpoint] dir), and otherwise exits 1 saying
// the master does not know the task. Before, it polled the new master's
// "no task" answers for ever: a task without checkpoints, lost with its
// master, left its submit hanging.
func TestSubmitFollowsAcrossAMasterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 3000, 500)
	command, env := cli()
	for _, tc := range []struct {
		name       string
		checkpoint bool
		exit       int
		stderr     string
	}{
		{"with a checkpoint dir", true, 0, ""},
		{"without", false, 1, "the master does not know the task"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, DeadAfter: "1500ms"})
			name := strings.ReplaceAll(tc.name, " ", "-")
			ckdir, output := filepath.Join(dir, name+".ck"), filepath.Join(dir, name+".model")
			job := ckJob(t, dir, name, train, test, output, 60, "1 epoch", ckdir)
			if !tc.checkpoint {
				job = lrJob(t, dir, name, train, test, output, 500, 2, 60, "bsp")
			}
			done := make(chan clustertest.Result, 1)
			go func() { done <- c.Run(2*time.Minute, "submit", "--log-level", "warn", job) }()
			cl := c.Client()
			for deadline := time.Now().Add(time.Minute); ; {
				rep, err := cl.Status(context.Background(), "")
				if err == nil && len(rep.Tasks) == 1 && rep.Tasks[0].Progress.Epoch >= 2 {
					break // two epochs done: a checkpoint written, when checkpointed
				}
				if time.Now().After(deadline) {
					t.Fatalf("the task did not run two epochs within a minute: %+v %v", rep.Tasks, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			c.RestartMaster()
			select {
			case r := <-done:
				if r.Exit != tc.exit || !strings.Contains(r.Stderr, tc.stderr) {
					t.Fatalf("submit exited %d after %v, want %d and stderr with %q:\n%s\n%s", r.Exit, r.Took, tc.exit, tc.stderr, r.Stdout, r.Stderr)
				}
			case <-time.After(3 * time.Minute):
				t.Fatal("submit still following three minutes after the restart")
			}
		})
	}
}

// waitDeclaredDead waits until the master's status has slave id dead.
func waitDeclaredDead(t *testing.T, cl *engine.Client, id string, deadline time.Time) {
	t.Helper()
	for {
		rep, err := cl.Status(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		dead := true
		for _, s := range rep.Slaves {
			if s.ID == id && s.Alive {
				dead = false
			}
		}
		if dead {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not declared dead", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A resume submitted right after a slave was killed, before the master
// declared it dead, is placed on it too; the task then fails by that
// death. The error must say so: before, it was "loading checkpoint ...:
// table "w": context canceled", naming no slave (a drill's immediate
// resume after a replicas = 1 task failed).
func TestResumeOntoAnUndeclaredDeadSlaveNamesIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 3000, 500)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, DeadAfter: "4s"})
	ckdir, output := filepath.Join(dir, "ck"), filepath.Join(dir, "m.model")
	job := unreplicated(t, ckJob(t, dir, "finished", train, test, output, 2, "1 epoch", ckdir))
	if r := c.Run(2*time.Minute, "submit", job); r.Exit != 0 {
		t.Fatalf("the task failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	// The checkpoint of the finished task: a resume loads its tables on
	// both slaves and writes the output again.
	c.Slaves[1].Kill()
	r := c.Run(2*time.Minute, "submit", "--resume", ckdir)
	if r.Exit == 0 {
		t.Fatalf("the resume succeeded: it was placed after the master declared slave-1 dead (4s after the kill)?\n%s", r.Stdout)
	}
	out := r.Stdout + r.Stderr
	if !strings.Contains(out, "slave-1") || !strings.Contains(out, "died") {
		t.Fatalf("the failure does not say that slave-1 died:\n%s", out)
	}
}
