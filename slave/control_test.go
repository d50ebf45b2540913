package slave

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/proto"
	"pgregory.net/rapid"
)

// start brings a task's stage up on c and returns its generation.
func start(t *testing.T, c *Control, task string, stage int, ranks []int, hosts ...string) int {
	t.Helper()
	acts, err := c.Step(Event{Kind: EvStartStage, Task: task, Stage: stage, StageName: "train", Ranks: ranks, Workers: 4, Hosts: hosts})
	if err != nil {
		t.Fatalf("start %s/%d: %v", task, stage, err)
	}
	if len(acts) != 1 || acts[0].Kind != ActLaunch || !slices.Equal(acts[0].Ranks, ranks) {
		t.Fatalf("start %s/%d: actions %+v, want one launch of %v", task, stage, acts, ranks)
	}
	return acts[0].Gen
}

func report(c *Control, gen int, ev proto.WorkerEvent) ([]Action, error) {
	return c.Step(Event{Kind: EvWorkerReport, Task: ev.Task, Stage: ev.Stage, Gen: gen, Report: ev})
}

func TestStartLaunchesRanks(t *testing.T) {
	c := NewControl(4)
	c.Step(Event{Kind: EvCreateTask, Task: "t1"})
	gen := start(t, c, "t1", 0, []int{1, 3})
	if got := c.Running("t1", 0); !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("running %v, want [1 3]", got)
	}
	gen2 := start(t, c, "t1", 1, []int{0})
	if gen2 == gen {
		t.Fatalf("two stage runs share generation %d", gen)
	}
}

func TestStartRefusesBadRequests(t *testing.T) {
	tests := []struct {
		name string
		ev   Event
		want string
	}{
		{"no task", Event{Kind: EvStartStage, Stage: 0, Ranks: []int{0}, Workers: 1}, "without a task"},
		{"negative stage", Event{Kind: EvStartStage, Task: "t", Stage: -1, Ranks: []int{0}, Workers: 1}, "bad stage"},
		{"no ranks", Event{Kind: EvStartStage, Task: "t", Ranks: nil, Workers: 1}, "no ranks"},
		{"more than slots", Event{Kind: EvStartStage, Task: "t", Ranks: []int{0, 1, 2}, Workers: 3}, "2 slots"},
		{"one-slave split", Event{Kind: EvStartStage, Task: "t", StageName: "sgd", Ranks: []int{0}, Workers: 2, OneSlave: true}, "stage sgd runs all its 2 workers on one slave, got 1"},
		{"rank out of range", Event{Kind: EvStartStage, Task: "t", Ranks: []int{5}, Workers: 2}, "bad or repeated rank 5"},
		{"repeated rank", Event{Kind: EvStartStage, Task: "t", Ranks: []int{1, 1}, Workers: 2}, "bad or repeated rank 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewControl(2)
			acts, err := c.Step(tt.ev)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one containing %q", err, tt.want)
			}
			if len(acts) != 0 {
				t.Fatalf("a refused start acted: %+v", acts)
			}
		})
	}
}

func TestDoubleStartIsAnErrorUntilStopped(t *testing.T) {
	c := NewControl(4)
	gen := start(t, c, "t1", 0, []int{0, 1})
	_, err := c.Step(Event{Kind: EvStartStage, Task: "t1", Stage: 0, StageName: "train", Ranks: []int{0}, Workers: 4})
	if !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "task t1 stage 0 (train)") {
		t.Fatalf("double start: %v, want ErrRunning naming the stage", err)
	}
	if got := c.Running("t1", 0); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("refused start changed state: running %v", got)
	}
	// The auto-parallelism trials stop a stage and start it again with
	// other ranks while the old workers are still winding down.
	acts, err := c.Step(Event{Kind: EvStopStage, Task: "t1", Stage: 0})
	if err != nil || len(acts) != 1 || acts[0].Kind != ActCancelStage || acts[0].Gen != gen || acts[0].Err == nil {
		t.Fatalf("stop: %+v %v", acts, err)
	}
	gen2 := start(t, c, "t1", 0, []int{2, 3})
	// A late report of the stopped run is refused, not mixed into the new run.
	if _, err := report(c, gen, proto.WorkerEvent{Task: "t1", Stage: 0, Rank: 0, Kind: proto.WorkerDone}); !errors.Is(err, ErrUnknownStage) {
		t.Fatalf("stale report: %v, want ErrUnknownStage", err)
	}
	if got := c.Running("t1", 0); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("running %v after restart, want [2 3]", got)
	}
	if _, err := report(c, gen2, proto.WorkerEvent{Task: "t1", Stage: 0, Rank: 2, Kind: proto.WorkerDone}); err != nil {
		t.Fatal(err)
	}
}

func TestStartAfterAllWorkersEndedIsAllowed(t *testing.T) {
	c := NewControl(2)
	gen := start(t, c, "t1", 0, []int{0})
	if _, err := report(c, gen, proto.WorkerEvent{Task: "t1", Stage: 0, Rank: 0, Kind: proto.WorkerDone}); err != nil {
		t.Fatal(err)
	}
	start(t, c, "t1", 0, []int{0})
}

func TestUnknownTaskAndStage(t *testing.T) {
	c := NewControl(2)
	for _, k := range []EventKind{EvEndStage, EvStopStage} {
		acts, err := c.Step(Event{Kind: k, Task: "nope", Stage: 2})
		if !errors.Is(err, ErrUnknownTask) || !strings.Contains(err.Error(), "task nope") || len(acts) != 0 {
			t.Fatalf("kind %d on unknown task: %+v %v", k, acts, err)
		}
	}
	c.Step(Event{Kind: EvCreateTask, Task: "t1"})
	if _, err := c.Step(Event{Kind: EvStopStage, Task: "t1", Stage: 2}); !errors.Is(err, ErrUnknownStage) || !strings.Contains(err.Error(), "task t1 stage 2") {
		t.Fatalf("stop of unknown stage: %v", err)
	}
	if _, err := report(c, 1, proto.WorkerEvent{Task: "nope", Stage: 0, Rank: 3, Kind: proto.WorkerEpoch}); !errors.Is(err, ErrUnknownTask) || !strings.Contains(err.Error(), "worker 3") {
		t.Fatalf("report of unknown task: %v", err)
	}
	if _, err := c.Step(Event{Kind: EventKind(99)}); err == nil {
		t.Fatal("unknown event kind accepted")
	}
}

func TestEndStageCancelsWithoutCause(t *testing.T) {
	c := NewControl(2)
	gen := start(t, c, "t1", 0, []int{0})
	acts, err := c.Step(Event{Kind: EvEndStage, Task: "t1", Stage: 0})
	if err != nil || len(acts) != 1 || acts[0].Kind != ActCancelStage || acts[0].Gen != gen || acts[0].Err != nil {
		t.Fatalf("end: %+v %v", acts, err)
	}
	if c.Running("t1", 0) != nil {
		t.Fatal("ended stage still known")
	}
}

func TestDropTaskCancelsEverythingWithReason(t *testing.T) {
	c := NewControl(4)
	start(t, c, "t1", 0, []int{0})
	start(t, c, "t2", 0, []int{1})
	acts, err := c.Step(Event{Kind: EvDropTask, Task: "t1", Reason: "slave s2 died"})
	if err != nil || len(acts) != 1 || acts[0].Kind != ActCancelTask || acts[0].Task != "t1" || acts[0].Err.Error() != "slave s2 died" {
		t.Fatalf("drop: %+v %v", acts, err)
	}
	if got := c.Tasks(); !slices.Equal(got, []string{"t2"}) {
		t.Fatalf("tasks %v after drop, want [t2]", got)
	}
	// Dropping again (the master cleans up on every slave it used) is fine
	// and still frees whatever the driver holds; the default reason says who.
	acts, err = c.Step(Event{Kind: EvDropTask, Task: "t1"})
	if err != nil || len(acts) != 1 || acts[0].Err.Error() != "task dropped by the master" {
		t.Fatalf("second drop: %+v %v", acts, err)
	}
	if _, err := report(c, 1, proto.WorkerEvent{Task: "t1", Stage: 0, Rank: 0, Kind: proto.WorkerError, Error: "x"}); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("report after drop: %v", err)
	}
}

func TestWorkerReportsPassThroughAndEnd(t *testing.T) {
	c := NewControl(4)
	gen := start(t, c, "t1", 0, []int{0, 1})
	for _, ev := range []proto.WorkerEvent{
		{Task: "t1", Stage: 0, Rank: 0, Kind: proto.WorkerProgress, Samples: 10, LossSum: 3},
		{Task: "t1", Stage: 0, Rank: 0, Kind: proto.WorkerEpoch, Epoch: 1, Seconds: 1.5, Metrics: map[string]float64{"train_acc": 0.9}},
		{Task: "t1", Stage: 0, Rank: 0, Kind: proto.WorkerDone, Seconds: 2},
		{Task: "t1", Stage: 0, Rank: 1, Kind: proto.WorkerError, Error: "boom"},
	} {
		acts, err := report(c, gen, ev)
		if err != nil || len(acts) != 1 || acts[0].Kind != ActPublish || acts[0].Event.Kind != ev.Kind || acts[0].Event.Rank != ev.Rank {
			t.Fatalf("report %+v: %+v %v", ev, acts, err)
		}
	}
	if got := c.Running("t1", 0); len(got) != 0 {
		t.Fatalf("running %v after every worker ended", got)
	}
	_, err := report(c, gen, proto.WorkerEvent{Task: "t1", Stage: 0, Rank: 0, Kind: proto.WorkerProgress, Samples: 1})
	if err == nil || !strings.Contains(err.Error(), "already ended") {
		t.Fatalf("report after done: %v", err)
	}
}

func TestNonFiniteReportBecomesTheWorkersError(t *testing.T) {
	tests := []struct {
		name string
		ev   proto.WorkerEvent
		want string
	}{
		{"NaN loss in progress", proto.WorkerEvent{Kind: proto.WorkerProgress, Samples: 5, LossSum: math.NaN()},
			"stage train worker 2: loss is NaN: the learning rate is likely too large"},
		{"infinite loss", proto.WorkerEvent{Kind: proto.WorkerProgress, LossSum: math.Inf(1)}, "loss is infinite"},
		{"NaN epoch metric", proto.WorkerEvent{Kind: proto.WorkerEpoch, Epoch: 3, Metrics: map[string]float64{"loss": math.NaN(), "acc": 0.5}},
			"stage train worker 2 epoch 3: loss is NaN: the learning rate is likely too large"},
		{"NaN done metric", proto.WorkerEvent{Kind: proto.WorkerDone, Metrics: map[string]float64{"test_acc": math.NaN()}}, "test_acc is NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewControl(4)
			gen := start(t, c, "t1", 0, []int{2})
			tt.ev.Task, tt.ev.Stage, tt.ev.Rank = "t1", 0, 2
			acts, err := report(c, gen, tt.ev)
			if err != nil {
				t.Fatal(err)
			}
			if len(acts) != 2 || acts[0].Kind != ActPublish || acts[1].Kind != ActCancelStage || acts[1].Gen != gen {
				t.Fatalf("actions %+v, want publish then cancel", acts)
			}
			ev := acts[0].Event
			if ev.Kind != proto.WorkerError || ev.Error != tt.want && !strings.Contains(ev.Error, tt.want) || ev.Rank != 2 {
				t.Fatalf("event %+v, want an error containing %q", ev, tt.want)
			}
			if acts[1].Err == nil || acts[1].Err.Error() != ev.Error {
				t.Fatalf("cancel cause %v, want %q", acts[1].Err, ev.Error)
			}
			if c.Running("t1", 0) != nil && slices.Contains(c.Running("t1", 0), 2) {
				t.Fatal("the failed worker still counts as running")
			}
			// The function winds down and reports its error: that goes out too.
			if _, err := report(c, gen, proto.WorkerEvent{Task: "t1", Stage: 0, Rank: 2, Kind: proto.WorkerError, Error: "ctx"}); err == nil {
				t.Fatal("a second end of the same worker was accepted")
			}
		})
	}
}

func TestPeerDeadFailsOnlyStagesWithShardsThere(t *testing.T) {
	c := NewControl(4)
	g1 := start(t, c, "t1", 0, []int{0}, "s1", "s2")
	start(t, c, "t2", 0, []int{1}, "s1", "s3")
	g3 := start(t, c, "t3", 1, []int{2}, "s2")
	acts, err := c.Step(Event{Kind: EvPeerDead, Node: "s2", Reason: "no heartbeat for 3s"})
	if err != nil || len(acts) != 2 {
		t.Fatalf("peer dead: %+v %v", acts, err)
	}
	for i, want := range []struct {
		task string
		gen  int
	}{{"t1", g1}, {"t3", g3}} {
		a := acts[i]
		if a.Kind != ActCancelStage || a.Task != want.task || a.Gen != want.gen || !strings.Contains(a.Err.Error(), "slave s2 holding its shards died: no heartbeat for 3s") {
			t.Fatalf("action %d: %+v", i, a)
		}
	}
	// Told twice, the slave does not cancel again.
	if acts, _ := c.Step(Event{Kind: EvPeerDead, Node: "s2"}); len(acts) != 0 {
		t.Fatalf("second death: %+v", acts)
	}
	// The cancelled workers still report their errors.
	if acts, err := report(c, g1, proto.WorkerEvent{Task: "t1", Stage: 0, Rank: 0, Kind: proto.WorkerError, Error: "x"}); err != nil || len(acts) != 1 {
		t.Fatalf("error report after peer death: %+v %v", acts, err)
	}
}

// A survivable stage is the master's to decide: a dead peer holding its
// shards leaves it running here.
func TestPeerDeadLeavesSurvivableStages(t *testing.T) {
	c := NewControl(4)
	if _, err := c.Step(Event{Kind: EvStartStage, Task: "t1", Stage: 0, StageName: "train", Ranks: []int{0, 1}, Workers: 4,
		Hosts: []string{"s1", "s2"}, Survivable: true}); err != nil {
		t.Fatal(err)
	}
	g2 := start(t, c, "t2", 0, []int{2}, "s1", "s2")
	acts, err := c.Step(Event{Kind: EvPeerDead, Node: "s2", Reason: "no heartbeat"})
	if err != nil || len(acts) != 1 || acts[0].Task != "t2" || acts[0].Gen != g2 {
		t.Fatalf("peer dead: %+v %v, want only t2 cancelled", acts, err)
	}
	if got := c.Running("t1", 0); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("survivable stage running %v, want [0 1]", got)
	}
}

func TestMasterGoneCancelsEveryTask(t *testing.T) {
	c := NewControl(4)
	start(t, c, "b", 0, []int{0})
	start(t, c, "a", 0, []int{1})
	acts, err := c.Step(Event{Kind: EvMasterGone, Reason: "no responders"})
	if err != nil || len(acts) != 2 || acts[0].Task != "a" || acts[1].Task != "b" {
		t.Fatalf("master gone: %+v %v", acts, err)
	}
	for _, a := range acts {
		if a.Kind != ActCancelTask || !strings.Contains(a.Err.Error(), "the master is gone: no responders") {
			t.Fatalf("action %+v", a)
		}
	}
	if len(c.Tasks()) != 0 {
		t.Fatalf("tasks %v remain", c.Tasks())
	}
}

// TestControlAgainstModel drives random event sequences and checks the
// machine against a plain model: the ranks running per stage are what was
// launched minus what ended, no rank ends twice, a launch never overlaps a
// live unstopped run, and every accepted report is published.
func TestControlAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := NewControl(3)
		type key struct {
			task  string
			stage int
		}
		type run struct {
			gen     int
			running map[int]bool
			stopped bool
		}
		model := map[key]*run{}
		for i := 0; i < 60; i++ {
			k := key{rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "task"), rapid.IntRange(0, 1).Draw(rt, "stage")}
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				ranks := rapid.SliceOfNDistinct(rapid.IntRange(0, 3), 1, 3, rapid.ID[int]).Draw(rt, "ranks")
				acts, err := c.Step(Event{Kind: EvStartStage, Task: k.task, Stage: k.stage, Ranks: ranks, Workers: 4})
				old := model[k]
				busy := old != nil && !old.stopped && len(old.running) > 0
				if busy != (err != nil) {
					rt.Fatalf("start %v over busy=%v: err %v", k, busy, err)
				}
				if err == nil {
					r := &run{gen: acts[0].Gen, running: map[int]bool{}}
					for _, x := range ranks {
						r.running[x] = true
					}
					model[k] = r
				}
			case 1, 2:
				r := model[k]
				if r == nil {
					continue
				}
				rank := rapid.IntRange(0, 3).Draw(rt, "rank")
				kind := rapid.SampledFrom([]string{proto.WorkerProgress, proto.WorkerDone, proto.WorkerError}).Draw(rt, "kind")
				acts, err := report(c, r.gen, proto.WorkerEvent{Task: k.task, Stage: k.stage, Rank: rank, Kind: kind, Error: "e"})
				if r.running[rank] != (err == nil) {
					rt.Fatalf("report of %v rank %d running=%v: err %v", k, rank, r.running[rank], err)
				}
				if err == nil {
					if len(acts) != 1 || acts[0].Kind != ActPublish {
						rt.Fatalf("accepted report not published: %+v", acts)
					}
					if kind != proto.WorkerProgress {
						delete(r.running, rank)
					}
				}
			case 3:
				_, err := c.Step(Event{Kind: EvStopStage, Task: k.task, Stage: k.stage})
				if r := model[k]; r != nil {
					r.stopped = true
				} else if err == nil {
					rt.Fatalf("stop of unknown %v accepted", k)
				}
			case 4:
				_, err := c.Step(Event{Kind: EvEndStage, Task: k.task, Stage: k.stage})
				if (model[k] == nil) != (err != nil) {
					rt.Fatalf("end of %v: err %v", k, err)
				}
				delete(model, k)
			case 5:
				c.Step(Event{Kind: EvDropTask, Task: k.task})
				for mk := range model {
					if mk.task == k.task {
						delete(model, mk)
					}
				}
			}
			for mk, r := range model {
				want := make([]int, 0)
				for x := range r.running {
					want = append(want, x)
				}
				slices.Sort(want)
				got := c.Running(mk.task, mk.stage)
				if !slices.Equal(append([]int{}, got...), want) {
					rt.Fatalf("%v running %v, model %v", mk, got, want)
				}
			}
		}
	})
}

func TestFencedDropsEveryTaskAndRefusesLateReports(t *testing.T) {
	c := NewControl(4)
	g := start(t, c, "b", 0, []int{0})
	c.Step(Event{Kind: EvCreateTask, Task: "a"})
	acts, err := c.Step(Event{Kind: EvFenced, Reason: "slave s1 was declared dead at membership epoch 7"})
	if err != nil || len(acts) != 2 {
		t.Fatalf("fenced: %+v %v", acts, err)
	}
	for i, task := range []string{"a", "b"} {
		if a := acts[i]; a.Kind != ActCancelTask || a.Task != task || !strings.Contains(a.Err.Error(), "fenced: slave s1 was declared dead at membership epoch 7") {
			t.Fatalf("action %d: %+v", i, a)
		}
	}
	if len(c.Tasks()) != 0 {
		t.Fatalf("tasks left: %v", c.Tasks())
	}
	// A worker of the fenced incarnation that reports late is not heard.
	if acts, err := report(c, g, proto.WorkerEvent{Task: "b", Stage: 0, Rank: 0, Kind: proto.WorkerDone}); !errors.Is(err, ErrUnknownTask) || len(acts) != 0 {
		t.Fatalf("late report after fencing: %+v %v", acts, err)
	}
}

func TestNonFiniteReportKeepsTheInstance(t *testing.T) {
	c := NewControl(1)
	g := start(t, c, "t", 0, []int{0})
	acts, err := report(c, g, proto.WorkerEvent{Task: "t", Stage: 0, Rank: 0, Slave: "s1", Instance: "i7", Kind: proto.WorkerProgress, LossSum: math.NaN()})
	if err != nil || len(acts) == 0 || acts[0].Event.Kind != proto.WorkerError || acts[0].Event.Instance != "i7" {
		t.Fatalf("actions %+v %v: the error event must keep the instance, or the master refuses it", acts, err)
	}
}
