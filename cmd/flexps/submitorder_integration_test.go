package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/status"
)

// TestSubmitSeveralJobsKeepsCommandLineOrder: `flexps submit a b c ...`
// hands the master its tasks in the order of the command line, so a
// master that schedules in submission order (sequential, and prioritized
// among equal priorities) runs them in that order. Before, submit sent
// every job from its own goroutine at once, and the master saw (and ran)
// them in whatever order those goroutines reached it.
func TestSubmitSeveralJobsKeepsCommandLineOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	command, env := cli()
	const jobs = 6
	var paths, want []string
	for i := range jobs {
		name := fmt.Sprintf("j%d", i)
		// Every task takes all 4 slots, so under either policy one runs
		// at a time and the others queue.
		paths = append(paths, lrJob(t, dir, name, train, test, filepath.Join(dir, name+".model"), 300, 4, 1, "asp"))
		want = append(want, name)
	}
	for _, policy := range []string{"sequential", "prioritized"} {
		t.Run(policy, func(t *testing.T) {
			c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, Policy: policy})
			r := c.Run(3*time.Minute, append([]string{"submit", "--log-level", "warn"}, paths...)...)
			if r.Exit != 0 {
				t.Fatalf("flexps submit failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
			}
			rep, err := c.Client().Status(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			ts := rep.Tasks
			if len(ts) != jobs {
				t.Fatalf("status lists %d tasks, want %d: %+v", len(ts), jobs, ts)
			}
			for _, tk := range ts {
				if tk.State != status.Done || tk.Started.IsZero() {
					t.Fatalf("task %s (%s): state %s, started %v", tk.ID, tk.Name, tk.State, tk.Started)
				}
			}
			slices.SortFunc(ts, func(a, b status.Task) int { return a.Started.Compare(b.Started) })
			var got []string
			for _, tk := range ts {
				got = append(got, tk.Name)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s master ran the tasks in the order %v, want the command line's %v", policy, got, want)
			}
		})
	}
}

// TestSubmitDetachGoesOnPastARefusedJob: `flexps submit --detach a b c`
// whose b the master refuses prints the ids of a and c, names b's file
// with the master's reason, and exits 1. Before, the refusal ended submit
// at once: its message named no file, and c was never submitted, without
// a word.
func TestSubmitDetachGoesOnPastARefusedJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 1, Slots: 2})
	job := func(name string, refused bool) string {
		in := train
		if refused {
			in = filepath.Join(dir, "missing.libsvm") // refused at submission: no such file
		}
		return lrJob(t, dir, name, in, test, filepath.Join(dir, name+".model"), 300, 1, 1, "asp")
	}
	for _, tc := range []struct {
		name    string
		refused []bool // per job
	}{
		{"refused in the middle", []bool{false, true, false}},
		{"refused first", []bool{true, false, false}},
		{"two refused", []bool{true, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var paths, want, bad []string
			for i, refused := range tc.refused {
				name := fmt.Sprintf("%s-%d", strings.ReplaceAll(tc.name, " ", "-"), i)
				p := job(name, refused)
				paths = append(paths, p)
				if refused {
					bad = append(bad, p)
				} else {
					want = append(want, name)
				}
			}
			r := c.Run(time.Minute, append([]string{"submit", "--detach", "--log-level", "warn"}, paths...)...)
			if r.Exit != 1 {
				t.Fatalf("exit %d, want 1:\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
			}
			for _, p := range bad {
				if !strings.Contains(r.Stderr, "flexps submit: "+p+": ") || !strings.Contains(r.Stderr, "missing.libsvm") {
					t.Errorf("stderr does not name the refused job %s and why:\n%s", p, r.Stderr)
				}
			}
			if msg := fmt.Sprintf("%d of %d tasks were not submitted", len(bad), len(paths)); !strings.Contains(r.Stderr, msg) {
				t.Errorf("stderr does not say %q:\n%s", msg, r.Stderr)
			}
			var got []string
			for _, id := range strings.Fields(r.Stdout) {
				rep, err := c.Client().Status(context.Background(), id)
				if err != nil {
					t.Fatalf("printed id %q: %v", id, err)
				}
				got = append(got, rep.Tasks[0].Name)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("submitted %v, want %v (stdout %q)", got, want, r.Stdout)
			}
		})
	}
}

// TestCancelSaysWhenTheTaskAlreadyEnded: `flexps cancel ID` stops a
// running task (exit 0); for a task that ended, done or cancelled before,
// it says so and exits 1. Before, it printed nothing and exited 0 whatever
// the task's state, as if it had stopped it.
func TestCancelSaysWhenTheTaskAlreadyEnded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 1, Slots: 2})
	submit := func(name string, epochs int) string {
		job := lrJob(t, dir, name, train, test, filepath.Join(dir, name+".model"), 300, 1, epochs, "asp")
		r := c.Run(time.Minute, "submit", "--detach", job)
		if r.Exit != 0 {
			t.Fatalf("submit: %d\n%s", r.Exit, r.Stderr)
		}
		return strings.TrimSpace(r.Stdout)
	}
	waitState := func(id, state string) {
		for deadline := time.Now().Add(time.Minute); ; {
			rep, err := c.Client().Status(context.Background(), id)
			if err == nil && rep.Tasks[0].State == state {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s not %s within a minute: %+v %v", id, state, rep.Tasks, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	done := submit("quick", 1)
	long := submit("long", 100000)
	waitState(done, status.Done)
	for _, tc := range []struct {
		name   string
		id     string
		state  string // wait for the task to be in it first ("": no wait)
		exit   int
		stderr string
		stdout string
	}{
		{"running", long, status.Running, 0, "", "task " + long + " (long) cancelled\n"},
		{"cancelled before", long, status.Cancelled, 1, "task " + long + " (long) already ended: cancelled; nothing to cancel", ""},
		{"done", done, "", 1, "task " + done + " (quick) already ended: done; nothing to cancel", ""},
		{"unknown", "tNoSuchTask", "", 1, `no task "tNoSuchTask"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.state != "" {
				waitState(tc.id, tc.state)
			}
			r := c.Run(time.Minute, "cancel", tc.id)
			if r.Exit != tc.exit || !strings.Contains(r.Stderr, tc.stderr) {
				t.Fatalf("cancel %s: exit %d, want %d and stderr with %q:\n%s", tc.id, r.Exit, tc.exit, tc.stderr, r.Stderr)
			}
			if r.Stdout != tc.stdout {
				t.Fatalf("cancel %s: stdout %q, want %q (a cancel that worked printed nothing)", tc.id, r.Stdout, tc.stdout)
			}
		})
	}
}
