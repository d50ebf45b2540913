package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/master/membership"
	"github.com/flexps/flexps/status"
)

// views records the membership views a client hears, with when it heard
// each.
type views struct {
	mu   sync.Mutex
	seen []seenView
}

type seenView struct {
	at time.Time
	v  proto.Membership
}

func watch(t *testing.T, cl *engine.Client) *views {
	t.Helper()
	w := &views{}
	stop, err := cl.WatchMembership(func(v proto.Membership) {
		w.mu.Lock()
		w.seen = append(w.seen, seenView{time.Now(), v})
		w.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return w
}

// gone returns the first view (after from) in which slave has no live
// incarnation numbered inc.
func (w *views) gone(slave string, inc uint64, from time.Time) (seenView, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.seen {
		if s.at.Before(from) {
			continue
		}
		if !slices.ContainsFunc(s.v.Members, func(m membership.Member) bool { return m.ID == slave && m.Incarnation == inc }) {
			return s, true
		}
	}
	return seenView{}, false
}

func slaveStatus(t *testing.T, cl *engine.Client, id string) (status.Slave, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := cl.Status(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Slaves {
		if s.ID == id {
			return s, rep.Epoch
		}
	}
	t.Fatalf("no slave %s in %+v", id, rep.Slaves)
	return status.Slave{}, 0
}

// runningAt reports whether the cluster's one task is running stage
// (any stage when stage < 0) with at least epochs epochs done.
func runningAt(cl *engine.Client, stage, epochs int) func() bool {
	return func() bool {
		rep, err := cl.Status(context.Background(), "")
		if err != nil || len(rep.Tasks) != 1 {
			return false
		}
		tk := rep.Tasks[0]
		return tk.State == status.Running && (stage < 0 || tk.Stage == stage) && tk.Progress.Epoch >= epochs
	}
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Drill 2: a slave stopped (SIGSTOP) for longer than the failure timeout is
// declared dead and fenced; resumed (SIGCONT), it learns so, drops its
// tasks, rejoins as a fresh incarnation, and a new task runs on it.
func TestDrillStoppedSlaveIsFencedAndRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 6000, 1000)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, Heartbeat: "100ms", DeadAfter: "600ms"})
	cl := c.Client()
	w := watch(t, cl)
	job := unreplicated(t, lrJob(t, dir, "long", train, test, "", 1000, 4, 100000, "asp"))
	done := make(chan clustertest.Result, 1)
	go func() { done <- c.Run(2*time.Minute, "submit", job) }()
	waitUntil(t, "task running on both slaves", time.Minute, func() bool {
		rep, err := cl.Status(context.Background(), "")
		return err == nil && len(rep.Tasks) == 1 && rep.Tasks[0].State == status.Running && rep.Tasks[0].Progress.Samples > 0
	})
	before, epoch0 := slaveStatus(t, cl, "slave-1")
	if !before.Alive || before.Incarnation == 0 || epoch0 == 0 {
		t.Fatalf("slave-1 before the stop: %+v at epoch %d", before, epoch0)
	}

	stopped := time.Now()
	if err := c.Slaves[1].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The master declares it dead (the event, not a wall-clock bound).
	var dead seenView
	waitUntil(t, "slave-1 declared dead", 30*time.Second, func() bool {
		var ok bool
		dead, ok = w.gone("slave-1", before.Incarnation, stopped)
		return ok
	})
	t.Logf("stop -> declared dead: %v (epoch %d -> %d)", dead.at.Sub(stopped).Round(time.Millisecond), epoch0, dead.v.Epoch)
	if dead.v.Epoch <= epoch0 {
		t.Fatalf("epoch %d after the death, was %d", dead.v.Epoch, epoch0)
	}
	// The task that used it fails naming it, as before fencing existed.
	var r clustertest.Result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("submit still running 30s after the slave was declared dead")
	}
	if out := r.Stdout + r.Stderr; r.Exit == 0 || !strings.Contains(out, "slave-1") || !strings.Contains(out, "died") {
		t.Fatalf("submit after the death (exit %d):\n%s", r.Exit, out)
	}
	// Stay stopped a while longer, so heartbeats and KV requests of the
	// old incarnation are queued when it resumes.
	time.Sleep(300 * time.Millisecond)
	if err := c.Slaves[1].Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var after status.Slave
	var epoch1 uint64
	waitUntil(t, "slave-1 back as a fresh incarnation", 30*time.Second, func() bool {
		after, epoch1 = slaveStatus(t, cl, "slave-1")
		return after.Alive && after.Incarnation > dead.v.Epoch-1 && after.Instance != before.Instance
	})
	t.Logf("slave-1: incarnation %d (%s) -> %d (%s), epoch %d", before.Incarnation, before.Instance, after.Incarnation, after.Instance, epoch1)
	if after.PID != before.PID {
		t.Fatalf("slave-1 is another process (pid %d, was %d): it should have rejoined, not restarted", after.PID, before.PID)
	}
	for _, p := range []*clustertest.Proc{c.Master, c.Slaves[0], c.Slaves[1]} {
		for _, l := range strings.Split(p.Output(), "\n") {
			if strings.Contains(l, "fenced") || strings.Contains(l, "refuse") || strings.Contains(l, "rejoin") {
				t.Logf("%s: %s", p.Name, l)
			}
		}
	}
	// The master lists the new instance as soon as it accepts the join;
	// the slave logs the rejoin when the master's answer reaches it.
	for _, want := range []string{"declared dead by the master and is fenced", "rejoined the cluster as a fresh instance"} {
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(c.Slaves[1].Output(), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("slave-1 did not log %q within 10s:\n%s", want, c.Slaves[1].Output())
			}
		}
	}
	// A new task runs on both slaves, the rejoined one included, and
	// learns as well as on a fresh cluster.
	model := filepath.Join(dir, "after.model")
	r = c.Run(2*time.Minute, "submit", lrJob(t, dir, "after", train, test, model, 1000, 4, 3, "bsp"))
	if r.Exit != 0 {
		t.Fatalf("task after the rejoin failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	rep, err := cl.Status(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	last := rep.Tasks[len(rep.Tasks)-1]
	if last.State != status.Done || last.Results[0].Placement["slave-1"] == 0 {
		t.Fatalf("task after the rejoin: %s on %+v", last.State, last.Results[0].Placement)
	}
	if a := accuracy(t, model, test); a < 0.75 {
		t.Fatalf("accuracy %.3f after the rejoin", a)
	}
	for _, p := range []*clustertest.Proc{c.Master, c.Slaves[0], c.Slaves[1]} {
		if out := p.Output(); strings.Contains(out, "panic") || strings.Contains(out, "DATA RACE") {
			t.Fatalf("%s:\n%s", p.Name, out)
		}
	}
}

// TestDetectionLatency measures kill -9 -> declared dead over
// FLEXPS_DETECT_KILLS kills (skipped when unset) with the default
// heartbeat_interval and failure_timeout, and logs p50/p99. The time of
// death is when a client hears the view without the slave.
func TestDetectionLatency(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FLEXPS_DETECT_KILLS"))
	if n <= 0 {
		t.Skip("set FLEXPS_DETECT_KILLS=20 to measure")
	}
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 1, Slots: 1, Heartbeat: "300ms", DeadAfter: "900ms"})
	cl := c.Client()
	w := watch(t, cl)
	var lat []time.Duration
	for i := range n {
		id := fmt.Sprintf("victim-%d", i)
		p := c.AddSlave(id, 2)
		s, _ := slaveStatus(t, cl, id)
		// Kill at a random phase of the heartbeat.
		time.Sleep(time.Duration(i*37%300) * time.Millisecond)
		killed := time.Now()
		p.Kill()
		var dead seenView
		waitUntil(t, id+" declared dead", 30*time.Second, func() bool {
			var ok bool
			dead, ok = w.gone(id, s.Incarnation, killed)
			return ok
		})
		lat = append(lat, dead.at.Sub(killed))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	t.Logf("detection latency over %d kills (heartbeat 300ms, failure_timeout 900ms): p50 %v p99 %v min %v max %v",
		n, pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), lat[0].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
}

// TestSlaveRestartedUnderItsIdRejoins: a slave killed (kill -9) and
// started again at once under the same id, as a supervisor does, joins
// once the master has declared the old process dead; before, the master
// refused the join ("id in use by live instance") and the new process
// exited at once. A second process started with the id of a live slave
// is still refused, within a few failure timeouts (not join_timeout).
func TestSlaveRestartedUnderItsIdRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 1, DeadAfter: "1s"})
	cl := c.Client()
	old, _ := slaveStatus(t, cl, "slave-1")
	c.Slaves[1].Kill()
	p := c.AddSlave("slave-1", 1)
	waitUntil(t, "the restarted slave-1 admitted", 20*time.Second, func() bool {
		if p.Exited() {
			t.Fatalf("the restarted slave-1 exited:\n%s", p.Output())
		}
		s, _ := slaveStatus(t, cl, "slave-1")
		return s.Alive && s.PID == p.Cmd.Process.Pid && s.Instance != old.Instance
	})

	dup := c.AddSlave("slave-0", 1)
	waitUntil(t, "the duplicate slave-0 refused", 20*time.Second, dup.Exited)
	if out := dup.Output(); !strings.Contains(out, "id in use by live instance") {
		t.Errorf("the duplicate slave-0 did not say why it exited:\n%s", out)
	}
	if s, _ := slaveStatus(t, cl, "slave-0"); !s.Alive || s.PID != c.Slaves[0].Cmd.Process.Pid {
		t.Errorf("slave-0 after a duplicate was refused: %+v (want the first process, alive)", s)
	}
}

// TestStoppedSlavesResumeMidTaskWithReplicas: SIGSTOP past the failure
// timeout, then SIGCONT, of a slave running workers of a survivable stage
// (replicas = 2), twice (slave-1, then slave-2). Each is declared dead,
// its workers are counted out and its shards fail over; resumed, it drops
// the task and rejoins. The task must finish. Before, a resumed slave
// answered the KV requests queued for it while it was stopped with "task
// ... has no shards on this slave", and a survivor's worker took that
// stale answer for its own failure: the task failed.
func TestStoppedSlavesResumeMidTaskWithReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 20000, 1000)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 3, Slots: 2, DeadAfter: "1s"})
	cl := c.Client()
	output := filepath.Join(dir, "m.model")
	job := lrJob(t, dir, "stops", train, test, output, 1000, 6, 24, "ssp")
	done := make(chan clustertest.Result, 1)
	go func() { done <- c.Run(4*time.Minute, "submit", job) }()
	for i, victim := range []string{"slave-1", "slave-2"} {
		running := runningAt(cl, 0, 2+3*i)
		waitUntil(t, "the stage's epoch", 2*time.Minute, func() bool {
			select {
			case r := <-done:
				t.Fatalf("the task ended before %s was stopped (%d):\n%s\n%s", victim, r.Exit, r.Stdout, r.Stderr)
			default:
			}
			return running()
		})
		before, _ := slaveStatus(t, cl, victim)
		p := c.Slaves[i+1]
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitDeclaredDead(t, cl, victim, time.Now().Add(30*time.Second))
		if err := p.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, victim+" back as a fresh incarnation", 30*time.Second, func() bool {
			s, _ := slaveStatus(t, cl, victim)
			return s.Alive && s.Instance != before.Instance
		})
		if rep, err := cl.Status(context.Background(), ""); err == nil && len(rep.Tasks) == 1 {
			t.Logf("%s back at epoch %d of 24", victim, rep.Tasks[0].Progress.Epoch)
		}
	}
	r := <-done
	all := r.Stdout + r.Stderr
	if r.Exit != 0 {
		t.Fatalf("the task failed although its tables kept a copy through each stop (%d):\n%s", r.Exit, all)
	}
	for _, want := range []string{"slave slave-1 died", "slave slave-2 died"} {
		if !strings.Contains(all, want) {
			t.Errorf("submit output does not say %q:\n%s", want, all)
		}
	}
	if a := accuracy(t, output, test); a < 0.7 {
		t.Errorf("model accuracy %.3f after two stops", a)
	}
}

// TestStoppedMasterNamesItsOwnStall: the master stopped (SIGSTOP) mid-task
// for three failure timeouts, then resumed. Its slaves dropped its tasks
// when they stopped hearing from it: the task fails, saying the silence
// was the master's own, and no slave is taken for dead (the next task
// runs). Before, the master declared a slave whose heartbeat it read late
// dead and named it as the cause ("slave s3 died: no heartbeat for
// 3.2s"), and with every heartbeat read in time the task waited for a
// stage its slaves had dropped.
func TestStoppedMasterNamesItsOwnStall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 6000, 1000)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, DeadAfter: "1s"})
	cl := c.Client()
	job := lrJob(t, dir, "mstop", train, test, "", 1000, 4, 100000, "ssp")
	done := make(chan clustertest.Result, 1)
	go func() { done <- c.Run(2*time.Minute, "submit", job) }()
	waitUntil(t, "the stage's first epoch", time.Minute, runningAt(cl, 0, 1))
	if err := c.Master.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := c.Master.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r := <-done
	all := r.Stdout + r.Stderr
	if r.Exit == 0 {
		t.Fatalf("the task succeeded although its slaves dropped it while the master was stopped:\n%s", all)
	}
	if !strings.Contains(all, "the master did not run for") {
		t.Errorf("submit output does not name the master's own stall:\n%s", all)
	}
	// No slave was taken for dead: the cluster runs the next task.
	again := lrJob(t, dir, "mafter", train, test, "", 1000, 4, 3, "ssp")
	if r := c.Run(2*time.Minute, "submit", again); r.Exit != 0 {
		t.Fatalf("a task after the stall: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
}
