package lifecycle

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/scheduler"
	"github.com/flexps/flexps/status"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// twoSlaves is a three-worker stage: ranks 0,1 on s1 and rank 2 on s2.
func twoSlaves() Config {
	return Config{Task: "t1", Stage: 1, Name: "train", Func: "lr", Workers: 3, Epochs: 4,
		Placement: []scheduler.Assignment{{Slave: "s1", Workers: 2}, {Slave: "s2", Workers: 1}},
		Hosts:     []string{"s1", "s2", "s3"}}
}

// started steps a stage through Begin and both start acknowledgements.
func started(t *testing.T, cfg Config) *Stage {
	t.Helper()
	s := New(cfg)
	s.Step(Begin{Now: t0})
	for _, a := range cfg.Placement {
		s.Step(Acked{Slave: a.Slave, Op: proto.OpStartWorkers})
	}
	if s.Phase() != Running {
		t.Fatalf("phase %v after every start was acknowledged, want running", s.Phase())
	}
	return s
}

func finished(t *testing.T, acts []Action) StageFinished {
	t.Helper()
	if len(acts) == 0 {
		t.Fatalf("no actions, want StageFinished")
	}
	f, ok := acts[len(acts)-1].(StageFinished)
	if !ok {
		t.Fatalf("last action %#v, want StageFinished", acts[len(acts)-1])
	}
	return f
}

func TestBeginSendsStartsInPlacementOrder(t *testing.T) {
	s := New(twoSlaves())
	got := s.Step(Begin{Now: t0})
	want := []Action{StartWorkers{Slave: "s1", Ranks: []int{0, 1}}, StartWorkers{Slave: "s2", Ranks: []int{2}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Begin: %#v, want %#v", got, want)
	}
	if s.Phase() != Starting {
		t.Fatalf("phase %v, want starting", s.Phase())
	}
	if again := s.Step(Begin{Now: t0}); again != nil {
		t.Fatalf("second Begin: %#v, want nothing", again)
	}
	if got := s.Step(Acked{Slave: "s1", Op: proto.OpStartWorkers}); got != nil {
		t.Fatalf("first ack: %#v, want nothing until every slave answered", got)
	}
	if got := s.Step(Acked{Slave: "s9", Op: proto.OpStartWorkers}); got != nil {
		t.Fatalf("ack of a slave outside the placement: %#v", got)
	}
	got = s.Step(Acked{Slave: "s2", Op: proto.OpStartWorkers})
	if len(got) != 1 || got[0].(Publish).Kind != status.EventStatus {
		t.Fatalf("last ack: %#v, want one status event", got)
	}
}

func TestStartFailureJoinsEveryError(t *testing.T) {
	s := New(twoSlaves())
	s.Step(Begin{Now: t0})
	s.Step(Acked{Slave: "s1", Op: proto.OpStartWorkers, Err: errors.New("slave s1: no such function")})
	f := finished(t, s.Step(Acked{Slave: "s2", Op: proto.OpStartWorkers, Err: errors.New("slave s2: busy")}))
	for _, want := range []string{"stage 1 (train)", "s1: no such function", "s2: busy"} {
		if f.Err == nil || !strings.Contains(f.Err.Error(), want) {
			t.Fatalf("error %v, want it to name %q", f.Err, want)
		}
	}
}

// TestSteps walks whole runs event by event and checks the actions each
// step returns.
func TestSteps(t *testing.T) {
	done := func(rank int, slave string, d time.Duration) WorkerDone {
		return WorkerDone{Stage: 1, Rank: rank, Slave: slave, Seconds: 1, Metrics: map[string]float64{"read_bytes": 10}, Now: at(d)}
	}
	type step struct {
		ev    Event
		kinds []string // action type names, in order
	}
	cases := []struct {
		name    string
		steps   []step
		wantErr string // "" success; else a substring of StageFinished.Err
	}{
		{"start progress done", []step{
			{WorkerProgress{Stage: 1, Rank: 0, Slave: "s1", Samples: 10, LossSum: 5}, nil},
			{Tick{Now: at(100 * time.Millisecond)}, nil}, // too early to publish
			{Tick{Now: at(600 * time.Millisecond)}, []string{"Publish"}},
			{Tick{Now: at(1200 * time.Millisecond)}, nil}, // nothing new
			{done(0, "s1", time.Second), nil},
			{done(1, "s1", time.Second), nil},
			{done(2, "s2", 2*time.Second), []string{"StageFinished"}},
		}, ""},
		{"report of another stage is ignored", []step{
			{WorkerFailed{Stage: 0, Rank: 0, Slave: "s1", Err: "late"}, nil},
			{done(0, "s1", time.Second), nil},
			{done(1, "s1", time.Second), nil},
			{done(2, "s2", time.Second), []string{"StageFinished"}},
		}, ""},
		{"worker failure", []step{
			{done(0, "s1", time.Second), nil},
			{WorkerFailed{Stage: 1, Rank: 2, Slave: "s2", Err: "index out of range"}, []string{"StageFinished"}},
		}, "stage 1 (train): worker 2 on slave s2: index out of range"},
		{"dead slave of the placement", []step{
			{SlaveDead{Slave: "s2", Err: errors.New("slave s2 died")}, []string{"StageFinished"}},
		}, "slave s2 died"},
		{"dead table host", []step{
			{SlaveDead{Slave: "s3", Err: errors.New("slave s3 died")}, []string{"StageFinished"}},
		}, "slave s3 died"},
		{"dead bystander is ignored", []step{
			{SlaveDead{Slave: "s7", Err: errors.New("slave s7 died")}, nil},
			{Cancel{Err: errors.New("cancelled by the user")}, []string{"StageFinished"}},
		}, "cancelled by the user"},
		{"cancel while running releases the barrier", []step{
			{BarrierArrived{Stage: 1, Rank: 0, Seq: 0, Waiter: "w0"}, nil},
			{Cancel{Err: errors.New("cancelled by the user")}, []string{"ReleaseBarrier", "StageFinished"}},
			{done(0, "s1", time.Second), nil},
			{BarrierArrived{Stage: 1, Rank: 1, Seq: 0, Waiter: "w1"}, []string{"ReleaseBarrier"}},
		}, "cancelled by the user"},
		{"barrier releases when every worker arrived", []step{
			{BarrierArrived{Stage: 1, Rank: 0, Seq: 0, Waiter: "a"}, nil},
			{BarrierArrived{Stage: 1, Rank: 1, Seq: 1, Waiter: "b"}, nil},
			{BarrierArrived{Stage: 1, Rank: 2, Seq: 0, Waiter: "c"}, nil},
			{BarrierArrived{Stage: 0, Rank: 2, Seq: 0, Waiter: "x"}, []string{"ReleaseBarrier"}}, // wrong stage: error
			{BarrierArrived{Stage: 1, Rank: 1, Seq: 0, Waiter: "d"}, []string{"ReleaseBarrier"}},
			{done(1, "s1", time.Second), nil}, // its request "b" is stale
			{done(0, "s1", time.Second), nil},
			{done(2, "s2", time.Second), []string{"ReleaseBarrier", "StageFinished"}}, // "b" still waits
		}, ""},
		// A worker that returns while others wait at a barrier it never
		// called: they waited forever, and the task hung until cancelled.
		{"a worker returns while the others wait at a barrier", []step{
			{BarrierArrived{Stage: 1, Rank: 1, Seq: 1, Waiter: "b"}, nil},
			{done(0, "s1", time.Second), []string{"ReleaseBarrier", "StageFinished"}},
		}, "stage 1 (train): worker 0 returned before its barrier 1, where other workers wait for it: every worker of a stage must call Barrier"},
		{"a worker waits at a barrier one that returned never called", []step{
			{BarrierArrived{Stage: 1, Rank: 0, Seq: 1, Waiter: "a"}, nil},
			{BarrierArrived{Stage: 1, Rank: 1, Seq: 1, Waiter: "b"}, nil},
			{BarrierArrived{Stage: 1, Rank: 2, Seq: 1, Waiter: "c"}, []string{"ReleaseBarrier"}},
			{done(2, "s2", time.Second), nil},
			{BarrierArrived{Stage: 1, Rank: 1, Seq: 2, Waiter: "b2"}, []string{"ReleaseBarrier", "StageFinished"}},
		}, "worker 2 returned before its barrier 2"},
		{"epochs fold when every worker reported", []step{
			{WorkerEpoch{Stage: 1, Rank: 0, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"loss": 1}}, nil},
			{WorkerEpoch{Stage: 1, Rank: 1, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"loss": 1}}, nil},
			{WorkerEpoch{Stage: 1, Rank: 2, Epoch: 1, Slave: "s2", Metrics: map[string]float64{"loss": 1}}, []string{"Publish"}},
			{WorkerEpoch{Stage: 1, Rank: 2, Epoch: 2, Slave: "s2", Metrics: map[string]float64{"loss": 1}}, nil},
			{done(0, "s1", time.Second), nil},
			{done(1, "s1", time.Second), nil},
			{done(2, "s2", time.Second), []string{"StageFinished"}},
		}, ""},
		{"an epoch in which no worker read a record", []step{
			{WorkerEpoch{Stage: 1, Rank: 0, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"samples": 0, "loss": 0}}, nil},
			{WorkerEpoch{Stage: 1, Rank: 1, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"samples": 0}}, nil},
			{WorkerEpoch{Stage: 1, Rank: 2, Epoch: 1, Slave: "s2", Metrics: map[string]float64{"samples": 0}}, []string{"StageFinished"}},
		}, "task t1 stage 1 (train) epoch 1: no worker trained on a record"},
		{"an epoch in which one worker read records", []step{
			{WorkerEpoch{Stage: 1, Rank: 0, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"samples": 0}}, nil},
			{WorkerEpoch{Stage: 1, Rank: 1, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"samples": 3}}, nil},
			{WorkerEpoch{Stage: 1, Rank: 2, Epoch: 1, Slave: "s2", Metrics: map[string]float64{"samples": 0}}, []string{"Publish"}},
			{done(0, "s1", time.Second), nil},
			{done(1, "s1", time.Second), nil},
			{done(2, "s2", time.Second), []string{"StageFinished"}},
		}, ""},
		// A test input of blank and comment lines: the test figures
		// were left out of the table and the task reported success.
		{"an epoch in which no worker scored a test record", []step{
			{WorkerEpoch{Stage: 1, Rank: 0, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"samples": 3, "test_samples": 0}}, nil},
			{WorkerEpoch{Stage: 1, Rank: 1, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"samples": 3, "test_samples": 0}}, nil},
			{WorkerEpoch{Stage: 1, Rank: 2, Epoch: 1, Slave: "s2", Metrics: map[string]float64{"samples": 3, "test_samples": 0}}, []string{"StageFinished"}},
		}, "task t1 stage 1 (train) epoch 1: no worker scored a test record (no records): the stage's test input holds no data lines"},
		{"an epoch in which one worker scored test records", []step{
			{WorkerEpoch{Stage: 1, Rank: 0, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"samples": 3, "test_samples": 0}}, nil},
			{WorkerEpoch{Stage: 1, Rank: 1, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"samples": 3, "test_samples": 2}}, nil},
			{WorkerEpoch{Stage: 1, Rank: 2, Epoch: 1, Slave: "s2", Metrics: map[string]float64{"samples": 3}}, []string{"Publish"}},
			{done(0, "s1", time.Second), nil},
			{done(1, "s1", time.Second), nil},
			{done(2, "s2", time.Second), []string{"StageFinished"}},
		}, ""},
		{"NaN loss in progress", []step{
			{WorkerProgress{Stage: 1, Rank: 1, Slave: "s1", Samples: 10, LossSum: math.NaN()}, []string{"StageFinished"}},
		}, "task t1 stage 1 (train) epoch 1: worker 1 on slave s1 reported loss = NaN"},
		{"infinite metric in an epoch", []step{
			{WorkerEpoch{Stage: 1, Rank: 2, Epoch: 3, Slave: "s2", Metrics: map[string]float64{"loss": math.Inf(1)}}, []string{"StageFinished"}},
		}, "epoch 3: worker 2 on slave s2 reported metric loss = +Inf"},
		{"NaN metric when done", []step{
			{WorkerDone{Stage: 1, Rank: 0, Slave: "s1", Metrics: map[string]float64{"loss": math.NaN()}}, []string{"StageFinished"}},
		}, "learning rate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := started(t, twoSlaves())
			var fin *StageFinished
			for i, st := range c.steps {
				acts := s.Step(st.ev)
				var kinds []string
				for _, a := range acts {
					kinds = append(kinds, reflect.TypeOf(a).Name())
					if f, ok := a.(StageFinished); ok {
						fin = &f
					}
				}
				if !reflect.DeepEqual(kinds, st.kinds) {
					t.Fatalf("step %d %#v: actions %v, want %v", i, st.ev, kinds, st.kinds)
				}
			}
			if fin == nil {
				t.Fatal("the stage never finished")
			}
			if c.wantErr == "" && fin.Err != nil {
				t.Fatalf("stage failed: %v", fin.Err)
			}
			if c.wantErr != "" && (fin.Err == nil || !strings.Contains(fin.Err.Error(), c.wantErr)) {
				t.Fatalf("error %v, want it to contain %q", fin.Err, c.wantErr)
			}
			if s.Phase() != Ended {
				t.Fatalf("phase %v after StageFinished", s.Phase())
			}
		})
	}
}

func TestNonFiniteIsErrNonFinite(t *testing.T) {
	s := started(t, twoSlaves())
	f := finished(t, s.Step(WorkerProgress{Stage: 1, Rank: 0, Slave: "s1", Epoch: 2, LossSum: math.Inf(-1)}))
	if !errors.Is(f.Err, ErrNonFinite) {
		t.Fatalf("%v does not wrap ErrNonFinite", f.Err)
	}
	if !strings.Contains(f.Err.Error(), "epoch 2") {
		t.Fatalf("%v does not name the reported epoch", f.Err)
	}
}

func TestResultFolding(t *testing.T) {
	s := started(t, twoSlaves())
	s.Step(WorkerProgress{Stage: 1, Rank: 0, Slave: "s1", Samples: 30, LossSum: 3})
	s.Step(WorkerProgress{Stage: 1, Rank: 2, Slave: "s2", Samples: 10, LossSum: 5})
	acts := s.Step(Tick{Now: at(2 * time.Second)})
	p := acts[0].(Publish).Progress
	if p.Samples != 40 || p.Loss != 0.2 || p.SamplesPerSec != 20 || p.Epochs != 4 {
		t.Fatalf("progress %+v, want 40 samples, loss 0.2, 20/s, 4 planned epochs", p)
	}
	for r, sl := range []string{"s1", "s1", "s2"} {
		s.Step(WorkerEpoch{Stage: 1, Rank: r, Slave: sl, Epoch: 1, Seconds: float64(r + 1), Metrics: map[string]float64{"loss": 1}})
		if r == 0 { // a repeat before and after the epoch is complete counts once
			s.Step(WorkerEpoch{Stage: 1, Rank: r, Slave: sl, Epoch: 1, Seconds: 9, Metrics: map[string]float64{"loss": 1}})
		}
	}
	if acts := s.Step(WorkerEpoch{Stage: 1, Rank: 2, Slave: "s2", Epoch: 1, Seconds: 9, Metrics: map[string]float64{"loss": 1}}); acts != nil {
		t.Fatalf("a repeated report of a published epoch: %#v", acts)
	}
	if got := s.Progress(); got.Epoch != 1 || got.Fraction != 0.25 {
		t.Fatalf("after epoch 1 of 4: %+v, want epoch 1, fraction 0.25", got)
	}
	s.Step(WorkerEpoch{Stage: 1, Rank: 0, Slave: "s1", Epoch: 2, Metrics: map[string]float64{"loss": 7}})
	s.Step(WorkerDone{Stage: 1, Rank: 2, Slave: "s2", Seconds: 2, BadLines: []string{"x"}, Metrics: map[string]float64{"read_bytes": 5}})
	s.Step(WorkerDone{Stage: 1, Rank: 0, Slave: "s1", Seconds: 3, Metrics: map[string]float64{"read_bytes": 7, "read_blocks": 2}})
	// Repeats (a slave sends a worker's end until it is acknowledged)
	// count once, and an error after a worker's end changes nothing.
	if acts := s.Step(WorkerDone{Stage: 1, Rank: 2, Slave: "s2", Seconds: 2, BadLines: []string{"x"}, Metrics: map[string]float64{"read_bytes": 5}}); acts != nil {
		t.Fatalf("a repeated done: %#v", acts)
	}
	if acts := s.Step(WorkerFailed{Stage: 1, Rank: 0, Slave: "s1", Err: "late"}); acts != nil {
		t.Fatalf("an error after the worker's done: %#v", acts)
	}
	f := finished(t, s.Step(WorkerDone{Stage: 1, Rank: 1, Slave: "s1", Seconds: 1, Now: at(4 * time.Second)}))
	r := f.Result
	if f.Err != nil || f.Stopped {
		t.Fatalf("finished %+v", f)
	}
	if r.Seconds != 4 || r.Samples != 40 || r.WorkerSeconds != 6 || r.Metrics["read_bytes"] != 12 {
		t.Fatalf("result %+v", r)
	}
	if !reflect.DeepEqual(r.Placement, map[string]int{"s1": 2, "s2": 1}) {
		t.Fatalf("placement %v", r.Placement)
	}
	if len(r.WorkerStats) != 3 || r.WorkerStats[0].Rank != 0 || r.WorkerStats[0].ReadBytes != 7 || r.WorkerStats[0].Blocks != 2 || r.WorkerStats[2].Rank != 2 {
		t.Fatalf("worker stats not folded in rank order: %+v", r.WorkerStats)
	}
	if len(r.Epochs) != 2 || r.Epochs[0].Epoch != 1 || r.Epochs[0].Seconds != 3 || r.Epochs[0].Workers != 3 ||
		r.Epochs[1].Epoch != 2 || r.Epochs[1].Workers != 1 || r.Epochs[1].Metrics["loss"] != 7 {
		t.Fatalf("epochs %+v: want epoch 1 of all three workers, then the partial epoch 2", r.Epochs)
	}
	if !reflect.DeepEqual(r.BadLines, []string{"x"}) {
		t.Fatalf("bad lines %v", r.BadLines)
	}
	if s.Progress().Fraction != 1 {
		t.Fatalf("fraction %v after the stage finished, want 1", s.Progress().Fraction)
	}
}

// Workers may finish before the master hears the last start
// acknowledgement: the stage completes then, not earlier.
func TestDoneBeforeLastAck(t *testing.T) {
	s := New(twoSlaves())
	s.Step(Begin{Now: t0})
	s.Step(Acked{Slave: "s1", Op: proto.OpStartWorkers})
	for r, sl := range []string{"s1", "s1", "s2"} {
		if acts := s.Step(WorkerDone{Stage: 1, Rank: r, Slave: sl}); acts != nil {
			t.Fatalf("done of rank %d before the last ack: %#v", r, acts)
		}
	}
	acts := s.Step(Acked{Slave: "s2", Op: proto.OpStartWorkers, Now: at(time.Second)})
	if f := finished(t, acts); f.Err != nil || f.Result.Seconds != 1 {
		t.Fatalf("finished %+v", f)
	}
}

func TestTrialStopsWorkersOnTheClock(t *testing.T) {
	cfg := twoSlaves()
	cfg.Trial = 2 * time.Second
	s := started(t, cfg)
	// Start-up: no samples yet; the trial's clock has not started.
	if acts := s.Step(Tick{Now: at(500 * time.Millisecond)}); acts != nil {
		t.Fatalf("before any sample: %#v", acts)
	}
	// The first samples start it; they are not measured (they include the
	// start-up).
	s.Step(WorkerProgress{Stage: 1, Rank: 0, Slave: "s1", Samples: 100, LossSum: 1})
	if acts := s.Step(Tick{Now: at(600 * time.Millisecond)}); len(acts) != 1 {
		t.Fatalf("first samples: %#v, want only a progress event", acts)
	}
	s.Step(WorkerProgress{Stage: 1, Rank: 1, Slave: "s1", Samples: 300, LossSum: 1})
	if acts := s.Step(Tick{Now: at(2599 * time.Millisecond)}); len(acts) != 1 {
		t.Fatalf("before the deadline: %#v, want only a progress event", acts)
	}
	acts := s.Step(Tick{Now: at(2600 * time.Millisecond)})
	want := []Action{StopWorkers{Slave: "s1"}, StopWorkers{Slave: "s2"}}
	if !reflect.DeepEqual(acts, want) {
		t.Fatalf("at the deadline: %#v, want %#v", acts, want)
	}
	if s.Phase() != Stopping {
		t.Fatalf("phase %v, want stopping", s.Phase())
	}
	if acts := s.Step(Tick{Now: at(3 * time.Second)}); acts != nil {
		t.Fatalf("stop sent twice: %#v", acts)
	}
	s.Step(Acked{Slave: "s1", Op: proto.OpStopStage})
	s.Step(WorkerFailed{Stage: 1, Rank: 0, Slave: "s1", Err: "stopped"})
	s.Step(WorkerFailed{Stage: 1, Rank: 1, Slave: "s1", Err: "stopped"})
	s.Step(WorkerProgress{Stage: 1, Rank: 2, Slave: "s2", Samples: 50}) // after the deadline: not measured
	f := finished(t, s.Step(WorkerDone{Stage: 1, Rank: 2, Slave: "s2", Now: at(5 * time.Second)}))
	if f.Err != nil || !f.Stopped || f.Result.Seconds != 2 || f.Result.Samples != 300 {
		t.Fatalf("trial result %+v: want stopped after 2s measured with the 300 samples reported after the first", f)
	}
}

// A trial whose workers report nothing ends TrialCap trial lengths after
// it began, having measured nothing.
func TestTrialWithoutSamplesEndsAtTheCap(t *testing.T) {
	cfg := twoSlaves()
	cfg.Trial = time.Second
	s := started(t, cfg)
	if acts := s.Step(Tick{Now: at(TrialCap*time.Second - 1)}); acts != nil {
		t.Fatalf("before the cap: %#v", acts)
	}
	if acts := s.Step(Tick{Now: at(TrialCap * time.Second)}); len(acts) != 2 {
		t.Fatalf("at the cap: %#v, want the workers stopped", acts)
	}
	s.Step(Acked{Slave: "s1", Op: proto.OpStopStage})
	s.Step(Acked{Slave: "s2", Op: proto.OpStopStage})
	for r, sl := range []string{"s1", "s1", "s2"} {
		s.Step(WorkerFailed{Stage: 1, Rank: r, Slave: sl, Err: "stopped"})
	}
	if s.Phase() != Ended {
		t.Fatalf("phase %v", s.Phase())
	}
}

func TestTrialStopFailure(t *testing.T) {
	cfg := twoSlaves()
	cfg.Trial = time.Second
	s := started(t, cfg)
	s.Step(Tick{Now: at(time.Second)})
	f := finished(t, s.Step(Acked{Slave: "s2", Op: proto.OpStopStage, Err: errors.New("slave s2 did not answer")}))
	if f.Err == nil || !strings.Contains(f.Err.Error(), "stage 1 (train): slave s2 did not answer") {
		t.Fatalf("error %v", f.Err)
	}
}

func TestCancelBeforeStartAcks(t *testing.T) {
	s := New(twoSlaves())
	s.Step(Begin{Now: t0})
	cause := errors.New("cancelled by the user")
	f := finished(t, s.Step(Cancel{Err: cause}))
	if f.Err != cause {
		t.Fatalf("error %v, want the cause unwrapped", f.Err)
	}
	if acts := s.Step(Acked{Slave: "s1", Op: proto.OpStartWorkers}); acts != nil {
		t.Fatalf("ack after the end: %#v", acts)
	}
}

func TestFromWorker(t *testing.T) {
	now := at(time.Second)
	cases := []struct {
		in   proto.WorkerEvent
		want Event
	}{
		{proto.WorkerEvent{Kind: proto.WorkerProgress, Stage: 1, Rank: 2, Slave: "s", Samples: 3, LossSum: 4, Epoch: 5},
			WorkerProgress{Stage: 1, Rank: 2, Slave: "s", Samples: 3, LossSum: 4, Epoch: 5}},
		{proto.WorkerEvent{Kind: proto.WorkerEpoch, Stage: 1, Rank: 2, Slave: "s", Epoch: 5, Seconds: 6},
			WorkerEpoch{Stage: 1, Rank: 2, Slave: "s", Epoch: 5, Seconds: 6}},
		{proto.WorkerEvent{Kind: proto.WorkerDone, Stage: 1, Rank: 2, Slave: "s", Seconds: 6, BadLines: []string{"x"}},
			WorkerDone{Stage: 1, Rank: 2, Slave: "s", Seconds: 6, BadLines: []string{"x"}, Now: now}},
		{proto.WorkerEvent{Kind: proto.WorkerError, Stage: 1, Rank: 2, Slave: "s", Error: "boom"},
			WorkerFailed{Stage: 1, Rank: 2, Slave: "s", Err: "boom"}},
		{proto.WorkerEvent{Kind: "gossip"}, nil},
	}
	for _, c := range cases {
		if got := FromWorker(c.in, now); !reflect.DeepEqual(got, c.want) {
			t.Errorf("FromWorker(%+v) = %#v, want %#v", c.in, got, c.want)
		}
	}
}

// A stage whose slots were granted but whose run did not begin yet (the
// task was cancelled while its placement was being set up) ends at once
// and never asks a slave to start.
func TestCancelBeforeBegin(t *testing.T) {
	s := New(twoSlaves())
	for _, ev := range []Event{
		WorkerDone{Stage: 1, Rank: 0, Slave: "s1"},
		Tick{Now: at(time.Hour)},
	} {
		if acts := s.Step(ev); acts != nil {
			t.Fatalf("%#v before Begin: %#v", ev, acts)
		}
	}
	acts := s.Step(BarrierArrived{Stage: 1, Rank: 0, Waiter: "w"})
	if len(acts) != 1 || acts[0].(ReleaseBarrier).Err == "" {
		t.Fatalf("barrier before Begin: %#v, want an error answer", acts)
	}
	cause := errors.New("cancelled by the user")
	if f := finished(t, s.Step(Cancel{Err: cause})); f.Err != cause {
		t.Fatalf("error %v", f.Err)
	}
	if acts := s.Step(Begin{Now: t0}); acts != nil {
		t.Fatalf("Begin after the end: %#v", acts)
	}
}

// Workers that read a block in different epochs skip the same malformed
// lines and report the same first ones: the stage's result listed a line
// once per worker that met it. Now each line once, up to five.
func TestBadLinesListedOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reports [3][]string // ranks 0, 1, 2
		want    []string
	}{
		{"none", [3][]string{}, nil},
		{"the same line from every worker", [3][]string{{"a"}, {"a"}, {"a"}}, []string{"a"}},
		{"overlapping", [3][]string{{"a", "b"}, {"b", "c"}, {"a", "d"}}, []string{"a", "b", "c", "d"}},
		{"at most five", [3][]string{{"a", "b", "c"}, {"c", "d", "e"}, {"f", "a"}}, []string{"a", "b", "c", "d", "e"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := started(t, twoSlaves())
			var f StageFinished
			for r, sl := range []string{"s1", "s1", "s2"} {
				if acts := s.Step(WorkerDone{Stage: 1, Rank: r, Slave: sl, Seconds: 1, BadLines: tc.reports[r], Now: at(time.Second)}); r == 2 {
					f = finished(t, acts)
				}
			}
			if !reflect.DeepEqual(f.Result.BadLines, tc.want) {
				t.Fatalf("bad lines %q, want %q", f.Result.BadLines, tc.want)
			}
		})
	}
}
