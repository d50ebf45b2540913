package master

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// These tests drive the real master over an embedded NATS server; the
// slaves are scripted: they answer control requests as a slave would, and
// the test publishes the worker events a slave's workers would.

type harness struct {
	t    *testing.T
	nc   *nats.Conn
	m    *Master
	clk  *fakeClock
	subj bus.Subjects
}

const deadAfter = 10 * time.Second

func newHarness(t *testing.T, policy string) *harness {
	t.Helper()
	return newHarnessWith(t, policy, bus.EmbeddedOptions{}, nil)
}

// newHarnessWith starts the bus with eo and lets mod adjust the master's
// configuration.
func newHarnessWith(t *testing.T, policy string, eo bus.EmbeddedOptions, mod func(*Config)) *harness {
	t.Helper()
	srv, err := bus.StartEmbedded(eo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	clk := &fakeClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	cfg := Config{Cluster: "t", Heartbeat: 20 * time.Millisecond, DeadAfter: deadAfter, Policy: policy,
		RequestTimeout: 5 * time.Second, Log: zerolog.Nop(), Now: clk.Now}
	if mod != nil {
		mod(&cfg)
	}
	m, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return &harness{t: t, nc: nc, m: m, clk: clk, subj: bus.For("t")}
}

// scriptedSlave answers the master's control requests and records them.
type scriptedSlave struct {
	id     string
	mu     sync.Mutex
	ops    []string
	refuse map[string]string // op -> error to answer
	// hold: op -> a channel the answer to that op waits for (closed: it
	// is sent); set under mu before the op arrives.
	hold   map[string]chan struct{}
	starts chan proto.SlaveCtl
	sub    *nats.Subscription // its control subject: unsubscribed, it is as good as killed
}

func (h *harness) slave(id string, slots int, refuse map[string]string) *scriptedSlave {
	h.t.Helper()
	return h.slaveAs(id, "inst-"+id, slots, refuse)
}

// slaveAs is slave with its instance named (a restarted slave's differs).
func (h *harness) slaveAs(id, instance string, slots int, refuse map[string]string) *scriptedSlave {
	h.t.Helper()
	s := &scriptedSlave{id: id, refuse: refuse, starts: make(chan proto.SlaveCtl, 16)}
	sub, err := h.nc.Subscribe(h.subj.SlaveCtl(id), func(msg *nats.Msg) {
		var req proto.SlaveCtl
		rep := proto.CtlReply{OK: true}
		if err := json.Unmarshal(msg.Data, &req); err != nil {
			rep = proto.CtlReply{Error: err.Error()}
		}
		rep.Instance = instance
		s.mu.Lock()
		s.ops = append(s.ops, req.Op)
		if why := s.refuse[req.Op]; why != "" {
			rep = proto.CtlReply{Error: why, Instance: instance}
		}
		hold := s.hold[req.Op]
		s.mu.Unlock()
		if req.Op == proto.OpStartWorkers && rep.OK {
			s.starts <- req
		}
		data, _ := json.Marshal(rep)
		if hold != nil {
			go func() {
				<-hold
				msg.Respond(data) // the asker may be gone
			}()
			return
		}
		if err := msg.Respond(data); err != nil {
			h.t.Errorf("slave %s: %v", id, err)
		}
	})
	if err != nil {
		h.t.Fatal(err)
	}
	s.sub = sub
	data, _ := json.Marshal(proto.JoinRequest{ID: id, Host: "host-" + id, Slots: slots, PID: 7, Instance: instance})
	msg, err := h.nc.Request(h.subj.Join(), data, 5*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	var rep proto.JoinReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil || !rep.OK {
		h.t.Fatalf("join %s: %s %v", id, msg.Data, err)
	}
	return s
}

func (s *scriptedSlave) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ops)
}

func (h *harness) started(s *scriptedSlave) proto.SlaveCtl {
	h.t.Helper()
	select {
	case req := <-s.starts:
		return req
	case <-time.After(5 * time.Second):
		h.t.Fatalf("slave %s was never asked to start workers (ops %v)", s.id, s.seen())
		return proto.SlaveCtl{}
	}
}

func (h *harness) event(ev proto.WorkerEvent) {
	h.t.Helper()
	if ev.Instance == "" {
		ev.Instance = "inst-" + ev.Slave
	}
	data, err := json.Marshal(ev)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.nc.Publish(h.subj.Event(), data); err != nil {
		h.t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) wait(id, what string, cond func(status.Task) bool) status.Task {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cl, err := h.m.Status(id)
		if err != nil {
			h.t.Fatal(err)
		}
		if st := cl.Tasks[0]; cond(st) {
			return st
		} else if time.Now().After(deadline) {
			h.t.Fatalf("task %s: %s: status %+v", id, what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) submit(task *tasks.MultiStageTask) string {
	h.t.Helper()
	id, err := h.m.Submit(context.Background(), task)
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

func (h *harness) cancel(id string) {
	h.t.Helper()
	data, _ := json.Marshal(proto.CancelRequest{ID: id})
	msg, err := h.nc.Request(h.subj.Cancel(), data, 5*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	var rep proto.CtlReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil || !rep.OK {
		h.t.Fatalf("cancel %s: %s", id, msg.Data)
	}
}

func oneStage(name string, workers int, params tasks.Params) *tasks.MultiStageTask {
	return tasks.NewTask(name).SetStages(tasks.Stage{Name: "train", Func: "test.none", Workers: workers, Params: params})
}

func inState(state string) func(status.Task) bool {
	return func(st status.Task) bool { return st.State == state }
}

func TestDriverStageRunsToDone(t *testing.T) {
	h := newHarness(t, "sequential")
	s := h.slave("s1", 2, nil)
	submitted := h.clk.Now()
	id := h.submit(oneStage("lr", 2, tasks.Params{"epochs": 2}))
	start := h.started(s)
	if !reflect.DeepEqual(start.Ranks, []int{0, 1}) || start.Stage != 0 || start.Workers != 2 {
		t.Fatalf("start request %+v", start)
	}
	h.wait(id, "running", inState(status.Running))
	for r := range 2 {
		h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: r, Slave: "s1", Kind: proto.WorkerProgress, Samples: 10, LossSum: 5})
	}
	h.clk.Advance(time.Second) // the next tick publishes progress
	st := h.wait(id, "progress folded", func(st status.Task) bool { return st.Progress.Samples == 20 })
	if st.Progress.Loss != 0.5 || st.Progress.Epochs != 2 {
		t.Fatalf("progress %+v, want loss 0.5 of 2 planned epochs", st.Progress)
	}
	for r := range 2 {
		h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: r, Slave: "s1", Kind: proto.WorkerEpoch, Epoch: 1, Metrics: map[string]float64{"loss": 1}})
	}
	h.wait(id, "epoch 1 of 2", func(st status.Task) bool { return st.Progress.Epoch == 1 && st.Progress.Fraction == 0.5 })
	h.clk.Advance(time.Second)
	for r := range 2 {
		h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: r, Slave: "s1", Kind: proto.WorkerDone, Seconds: 1.5})
	}
	st = h.wait(id, "done", inState(status.Done))
	if len(st.Results) != 1 || st.Results[0].Samples != 20 || st.Results[0].WorkerSeconds != 3 || len(st.Results[0].Epochs) != 1 {
		t.Fatalf("results %+v", st.Results)
	}
	if !st.Submitted.Equal(submitted) || !st.Started.Equal(submitted) || !st.Finished.Equal(submitted.Add(2*time.Second)) {
		t.Fatalf("timestamps submitted %v started %v finished %v: want them from the injected clock", st.Submitted, st.Started, st.Finished)
	}
	if got := st.Results[0].Seconds; got != 2 {
		t.Fatalf("stage seconds %v by the injected clock, want 2", got)
	}
	wantOps := []string{proto.OpCreateTables, proto.OpPrepareStage, proto.OpStartWorkers, proto.OpEndStage, proto.OpDropTask}
	deadline := time.Now().Add(5 * time.Second)
	for !reflect.DeepEqual(s.seen(), wantOps) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := s.seen(); !reflect.DeepEqual(got, wantOps) {
		t.Fatalf("slave saw %v, want %v", got, wantOps)
	}
}

func TestDriverNonFiniteLossFailsWithoutOutput(t *testing.T) {
	h := newHarness(t, "sequential")
	s := h.slave("s1", 1, nil)
	out := filepath.Join(t.TempDir(), "model.bin")
	task := oneStage("lr", 1, nil)
	task.Output = out
	task.AddTable(kvstore.TableSpec{Name: "w", Size: 4})
	// The model is read over the KV subject: nothing may ask for it.
	var kv sync.Mutex
	kvReqs := 0
	if _, err := h.nc.Subscribe(h.subj.SlaveKV("s1"), func(*nats.Msg) { kv.Lock(); kvReqs++; kv.Unlock() }); err != nil {
		t.Fatal(err)
	}
	id := h.submit(task)
	h.started(s)
	h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: 0, Slave: "s1", Kind: proto.WorkerProgress, Epoch: 3, Samples: 5, LossSum: math.NaN()})
	st := h.wait(id, "failed", inState(status.Failed))
	for _, want := range []string{"task " + id, "stage 0 (train)", "epoch 3", "learning rate"} {
		if !strings.Contains(st.Reason, want) {
			t.Fatalf("reason %q does not name %q", st.Reason, want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("output of a failed stage: stat %v", err)
	}
	kv.Lock()
	defer kv.Unlock()
	if kvReqs != 0 {
		t.Fatalf("%d KV requests after the stage failed: the master read the model", kvReqs)
	}
}

func TestDriverWorkerFailure(t *testing.T) {
	h := newHarness(t, "sequential")
	s := h.slave("s1", 2, nil)
	id := h.submit(oneStage("lr", 2, nil))
	h.started(s)
	h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: 0, Slave: "s1", Kind: proto.WorkerDone})
	h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: 1, Slave: "s1", Kind: proto.WorkerError, Error: "boom"})
	st := h.wait(id, "failed", inState(status.Failed))
	if want := "stage 0 (train): worker 1 on slave s1: boom"; !strings.Contains(st.Reason, want) {
		t.Fatalf("reason %q, want %q", st.Reason, want)
	}
}

func TestDriverStartRefused(t *testing.T) {
	h := newHarness(t, "sequential")
	h.slave("s1", 1, map[string]string{proto.OpStartWorkers: "no stage function \"test.none\""})
	id := h.submit(oneStage("lr", 1, nil))
	st := h.wait(id, "failed", inState(status.Failed))
	if !strings.Contains(st.Reason, "stage 0 (train): slave s1: no stage function") {
		t.Fatalf("reason %q", st.Reason)
	}
}

func TestDriverBarrier(t *testing.T) {
	h := newHarness(t, "sequential")
	s := h.slave("s1", 3, nil)
	id := h.submit(oneStage("lr", 3, nil))
	h.started(s)
	arrive := func(stage, rank, seq int) proto.CtlReply {
		data, _ := json.Marshal(proto.BarrierRequest{Task: id, Stage: stage, Rank: rank, Seq: seq})
		msg, err := h.nc.Request(h.subj.Barrier(), data, 5*time.Second)
		if err != nil {
			t.Error(err)
			return proto.CtlReply{}
		}
		var rep proto.CtlReply
		if err := json.Unmarshal(msg.Data, &rep); err != nil {
			t.Error(err)
		}
		return rep
	}
	if rep := arrive(4, 0, 0); rep.OK || !strings.Contains(rep.Error, "not running") || !rep.Stopped {
		t.Fatalf("barrier of a stage that is not running: %+v", rep)
	}
	reps := make([]proto.CtlReply, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); reps[r] = arrive(0, r, 0) }()
	}
	wg.Wait()
	for r, rep := range reps {
		if !rep.OK {
			t.Fatalf("rank %d at the barrier: %+v", r, rep)
		}
	}
	// A worker that asks again for barrier 0 (its answer lost on the
	// bus) is answered at once.
	if rep := arrive(0, 1, 0); !rep.OK {
		t.Fatalf("barrier 0 asked again: %+v", rep)
	}
	// A worker left waiting when the stage fails is told why.
	var late proto.CtlReply
	wg.Add(1)
	go func() { defer wg.Done(); late = arrive(0, 0, 1) }()
	h.wait(id, "running", inState(status.Running))
	deadline := time.Now().Add(5 * time.Second)
	for !h.waiting(id) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: 2, Slave: "s1", Kind: proto.WorkerError, Error: "boom"})
	wg.Wait()
	if late.OK || !strings.Contains(late.Error, "ended before every worker reached the barrier") || !late.Stopped {
		t.Fatalf("waiter of a failed stage: %+v", late)
	}
}

// waiting reports whether a worker of task id waits at a barrier.
func (h *harness) waiting(id string) bool {
	h.m.mu.Lock()
	tr := h.m.tasks[id]
	h.m.mu.Unlock()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.stage != nil && tr.stage.Waiting() > 0
}

func TestDriverCancelWhileQueuedAndRunning(t *testing.T) {
	h := newHarness(t, "sequential")
	s := h.slave("s1", 1, nil)
	a := h.submit(oneStage("a", 1, nil))
	b := h.submit(oneStage("b", 1, nil))
	h.started(s)
	h.wait(a, "a runs", inState(status.Running))
	h.wait(b, "b queued behind a", inState(status.Queued))
	h.cancel(b)
	st := h.wait(b, "b cancelled while queued", inState(status.Cancelled))
	if st.Reason != errCancelled.Error() || !st.Started.IsZero() {
		t.Fatalf("queued task cancelled: %+v", st)
	}
	h.cancel(a)
	h.wait(a, "a cancelled while running", inState(status.Cancelled))
	select {
	case req := <-s.starts:
		t.Fatalf("the cancelled queued task started: %+v", req)
	default:
	}
}

// A task cancelled while the master waits for a slave's answer (here: to
// create its tables) ends cancelled, not failed with the interrupted
// request ("slave s1 did not answer create_tables: context canceled", as a
// `flexps submit` interrupted early left it).
func TestDriverCancelWhileASlaveAnswers(t *testing.T) {
	for _, op := range []string{proto.OpCreateTables, proto.OpPrepareStage} {
		t.Run(op, func(t *testing.T) {
			h := newHarness(t, "sequential")
			s := h.slave("s1", 1, nil)
			release := make(chan struct{})
			defer close(release)
			s.mu.Lock()
			s.hold = map[string]chan struct{}{op: release}
			s.mu.Unlock()
			id := h.submit(oneStage("a", 1, nil))
			deadline := time.Now().Add(5 * time.Second)
			for !slices.Contains(s.seen(), op) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			h.cancel(id)
			st := h.wait(id, "cancelled", func(st status.Task) bool { return st.State == status.Cancelled || st.State == status.Failed })
			if st.State != status.Cancelled || st.Reason != errCancelled.Error() {
				t.Fatalf("cancelled during %s: state %s, reason %q", op, st.State, st.Reason)
			}
		})
	}
}

// Tasks are queued in submission order at submission: with the
// sequential policy the second never overtakes the first, however their
// goroutines are scheduled.
func TestDriverSubmissionOrder(t *testing.T) {
	for range 5 {
		h := newHarness(t, "sequential")
		h.slave("s1", 2, nil)
		h.slave("s2", 2, nil)
		var ids []string
		for i := range 4 {
			ids = append(ids, h.submit(oneStage(fmt.Sprint("t", i), 1, nil)))
		}
		h.wait(ids[0], "first runs", inState(status.Running))
		for _, id := range ids[1:] {
			if cl, _ := h.m.Status(id); cl.Tasks[0].State != status.Queued {
				t.Fatalf("task %s is %s while the first runs", id, cl.Tasks[0].State)
			}
		}
		for _, id := range ids {
			h.cancel(id)
		}
	}
}

func TestDriverDeadSlaveFailsTask(t *testing.T) {
	h := newHarness(t, "sequential")
	s := h.slave("s1", 1, nil)
	id := h.submit(oneStage("lr", 1, nil))
	h.started(s)
	h.clk.Advance(deadAfter + time.Second)
	st := h.wait(id, "failed", inState(status.Failed))
	if !strings.Contains(st.Reason, "slave s1") || !strings.Contains(st.Reason, "died") {
		t.Fatalf("reason %q, want the dead slave named", st.Reason)
	}
}

// TestStallReconciledWithTheSlaves: after the master did not run for
// longer than failure_timeout (starved with its whole host, say), a task
// goes on when every slave it used says it still runs it, and fails,
// naming the stall and the slave's answer, when one stopped it.
func TestStallReconciledWithTheSlaves(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse map[string]string // s2's answers
		fails  bool
	}{
		{"every slave still runs it", nil, false},
		{"a slave stopped it", map[string]string{proto.OpHoldsTask: "slave s2 stopped task x: it heard no word from the master"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "sequential")
			s1 := h.slave("s1", 1, nil)
			s2 := h.slave("s2", 1, tc.refuse)
			id := h.submit(oneStage("lr", 2, nil))
			starts := []proto.SlaveCtl{h.started(s1), h.started(s2)}
			h.wait(id, "running", inState(status.Running))
			h.m.mu.Lock()
			h.m.lastTick = time.Now().Add(-2 * deadAfter) // the next tick finds the stall
			h.m.mu.Unlock()
			h.eventually("both slaves asked", func() bool {
				return slices.Contains(s1.seen(), proto.OpHoldsTask) && slices.Contains(s2.seen(), proto.OpHoldsTask)
			})
			if tc.fails {
				st := h.wait(id, "failed", inState(status.Failed))
				for _, want := range []string{"the master did not run for", "slave s2 stopped task"} {
					if !strings.Contains(st.Reason, want) {
						t.Fatalf("reason %q does not name %q", st.Reason, want)
					}
				}
				return
			}
			for _, st := range starts {
				for _, r := range st.Ranks {
					h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: r, Slave: strings.TrimPrefix(st.Instance, "inst-"), Kind: proto.WorkerDone})
				}
			}
			h.wait(id, "done", inState(status.Done))
		})
	}
}

// A slave killed while the master stalled cannot answer whether it still
// runs the task: its death decides (here the task fails naming a dead
// slave, as without the stall), not the question.
func TestStallLeavesADeadSlaveToItsDeath(t *testing.T) {
	h := newHarness(t, "sequential")
	s1 := h.slave("s1", 1, nil)
	s2 := h.slave("s2", 1, nil)
	id := h.submit(oneStage("lr", 2, nil))
	h.started(s1)
	h.started(s2)
	h.wait(id, "running", inState(status.Running))
	if err := s2.sub.Unsubscribe(); err != nil { // as good as killed
		t.Fatal(err)
	}
	h.m.mu.Lock()
	h.m.lastTick = time.Now().Add(-2 * deadAfter)
	h.m.mu.Unlock()
	h.eventually("s1 asked", func() bool { return slices.Contains(s1.seen(), proto.OpHoldsTask) })
	// No heartbeats: both silent at once, the detector suspects itself
	// first (one more timeout each), then declares them dead.
	h.clk.Advance(deadAfter + time.Second)
	h.eventually("the detector's suspicion", func() bool {
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		last, _ := h.m.mem.LastSeen("s2")
		return !last.Before(h.clk.Now())
	})
	h.clk.Advance(deadAfter + time.Second)
	st := h.wait(id, "failed", inState(status.Failed))
	if !strings.Contains(st.Reason, "died") || strings.Contains(st.Reason, "did not run for") {
		t.Fatalf("reason %q, want the dead slave named, not the stall", st.Reason)
	}
}

// A queued stage that the cluster, shrunk by a slave that left, can no
// longer run even with every slot free waits for slaves to come back and
// says so (status Waiting, an EventWaiting to its followers); once a
// slave joins it starts. Before, it waited without a word, and so did
// `flexps submit`.
func TestQueuedStageSaysWhenTheClusterShrankBelowIt(t *testing.T) {
	h := newHarness(t, "sequential")
	s1 := h.slave("s1", 1, nil)
	s2 := h.slave("s2", 1, nil)
	s3 := h.slave("s3", 2, nil)
	first := h.submit(oneStage("first", 4, nil))
	h.started(s1)
	h.started(s2)
	h.started(s3)
	second := h.submit(oneStage("second", 4, nil))
	h.wait(second, "queued", inState(status.Queued))
	data, _ := json.Marshal(proto.Leave{ID: "s1", Instance: "inst-s1"})
	if err := h.nc.Publish(h.subj.Leave(), data); err != nil {
		t.Fatal(err)
	}
	h.eventually("s1 gone", func() bool { return !h.m.isAlive("s1") })
	h.cancel(first)
	st := h.wait(second, "waiting named", func(st status.Task) bool { return st.Waiting != "" })
	for _, want := range []string{"asks for 4 workers but the cluster has 3 worker slots on 2 live slaves", "it waits until enough slaves are back", "flexps cancel " + second} {
		if !strings.Contains(st.Waiting, want) {
			t.Fatalf("waiting %q does not say %q", st.Waiting, want)
		}
	}
	if st.State != status.Queued {
		t.Fatalf("state %s, want it still queued", st.State)
	}
	s4 := h.slave("s4", 1, nil)
	h.started(s4)
	h.wait(second, "running, no longer waiting", func(st status.Task) bool { return st.State == status.Running && st.Waiting == "" })
}

// Two tasks checkpointing into one directory would interleave their
// numbering and delete each other's files: a task (or a resume) naming the
// directory of a task still running is refused, naming that task; once it
// ended the directory is free.
func TestCheckpointDirOfARunningTaskIsRefused(t *testing.T) {
	h := newHarness(t, "sequential")
	s := h.slave("s1", 2, nil)
	dir := t.TempDir()
	withDir := func(name, d string) *tasks.MultiStageTask {
		task := oneStage(name, 1, nil)
		task.Checkpoint = tasks.Checkpoint{Dir: d, Every: "1 epochs"}
		return task
	}
	first := h.submit(withDir("first", dir))
	h.started(s)
	h.wait(first, "running", inState(status.Running))
	for _, d := range []string{dir, dir + "/", filepath.Join(dir, ".")} {
		if _, err := h.m.Submit(context.Background(), withDir("second", d)); err == nil || !strings.Contains(err.Error(), "task "+first+" (first), still running, writes its checkpoints there") {
			t.Fatalf("dir %q: %v, want the running task named", d, err)
		}
	}
	if _, err := h.m.Submit(context.Background(), withDir("elsewhere", filepath.Join(dir, "other"))); err != nil {
		t.Fatalf("another dir: %v", err)
	}
	h.cancel(first)
	h.wait(first, "cancelled", inState(status.Cancelled))
	if _, err := h.m.Submit(context.Background(), withDir("after", dir)); err != nil {
		t.Fatalf("after the first ended: %v", err)
	}
}

// A task whose output is a file of one of its inputs is refused at
// submission, naming the input: the model was written over the data at
// the task's end (a test file replaced by the model, silently).
func TestOutputOverAnInputIsRefused(t *testing.T) {
	h := newHarness(t, "sequential")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	train, test := filepath.Join(data, "train.txt"), filepath.Join(dir, "test.txt")
	for _, p := range []string{train, test} {
		if err := os.WriteFile(p, []byte("1 1:1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink(train, link); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, test)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, train, output string
		refused             string // the input named, "" when accepted
	}{
		{"the test file", train, test, "test"},
		{"a file of an input directory", data, train, "train"},
		{"a file of a glob", filepath.Join(data, "*.txt"), train, "train"},
		{"the test file by a relative path", train, rel, "test"},
		{"the train file read through a link", link, train, "train"},
		// The model replaces the link, not the file it points to.
		{"a link to the train file", train, link, ""},
		{"a new file beside them", train, filepath.Join(dir, "m.model"), ""},
		{"a new file in the input directory", data, filepath.Join(data, "m.model"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := oneStage("out", 1, nil).
				SetInput("train", tasks.InputSpec{Path: tc.train, Format: "text"}).
				SetInput("test", tasks.InputSpec{Path: test, Format: "text"})
			task.Output = tc.output
			_, err := h.m.Submit(context.Background(), task)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if want := fmt.Sprintf("output %s is a file of its input %q", tc.output, tc.refused); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("%v, want an error with %q", err, want)
			}
		})
	}
}

// TestQueuedStageSaysWhatItWaitsFor: a queued stage that fits the
// cluster says, in flexps status, why it has not started: the slots it
// asks for are busy (and who holds them), or the policy holds it back.
// Until now only a stage the cluster shrank below said anything.
func TestQueuedStageSaysWhatItWaitsFor(t *testing.T) {
	for _, tc := range []struct {
		policy       string
		first, later int // workers of the running task and of the queued one
		want         []string
	}{
		{"greedy", 2, 1, []string{"stage 0 asks for 1 worker; 0 slots free now; ", " (a) holds 2"}},
		{"greedy", 1, 2, []string{"stage 0 asks for 2 workers; 1 slot free now; ", " (a) holds 1"}},
		{"sequential", 1, 1, []string{"stage 0 asks for 1 worker and they are free, but the sequential policy runs one task at a time; ", " (a) holds 1"}},
	} {
		t.Run(fmt.Sprintf("%s/%d+%d", tc.policy, tc.first, tc.later), func(t *testing.T) {
			h := newHarness(t, tc.policy)
			s := h.slave("s1", 2, nil)
			a := h.submit(oneStage("a", tc.first, nil))
			h.started(s)
			h.wait(a, "a runs", inState(status.Running))
			b := h.submit(oneStage("b", tc.later, nil))
			st := h.wait(b, "b queued, saying why", func(st status.Task) bool { return st.State == status.Queued && st.Queued != "" })
			for _, w := range tc.want {
				if !strings.Contains(st.Queued, w) {
					t.Fatalf("queued %q does not say %q", st.Queued, w)
				}
			}
			if !strings.Contains(st.Queued, a) || st.Waiting != "" {
				t.Fatalf("queued %q does not name task %s, or waiting %q is set", st.Queued, a, st.Waiting)
			}
			h.cancel(a)
			h.wait(a, "a cancelled", inState(status.Cancelled))
			st = h.wait(b, "b runs", inState(status.Running))
			if st.Queued != "" {
				t.Fatalf("running task still says queued: %q", st.Queued)
			}
			h.cancel(b)
			h.wait(b, "b cancelled", inState(status.Cancelled))
		})
	}
}
