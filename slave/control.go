package slave

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"

	"github.com/flexps/flexps/internal/proto"
)

// Control is the slave's control state as a pure state machine, in the
// style of etcd's raft: the driver (Slave) turns control requests, worker
// reports, dead peers and a lost master into Events, calls Step, and
// carries out the Actions it gets back (launch worker goroutines, cancel a
// stage's or a task's context, publish an event to the master, log).
// Control has no goroutines, clocks or I/O, so every lifecycle rule is
// tested step by step without NATS. It is not safe for concurrent use; the
// driver serializes Steps under its lock.
//
// Each start of a stage gets a generation number, so reports of workers
// from a stopped run are told apart from the run that replaced it. A
// worker report is checked before it goes out: a non-finite number would
// make the JSON encoding fail and the event vanish, so it becomes the
// worker's error instead, naming the stage, worker and epoch.
type Control struct {
	slots int
	tasks map[string]*ctlTask
	gen   int
}

type ctlTask struct {
	stages map[int]*ctlStage
}

type ctlStage struct {
	name    string
	gen     int
	hosts   []string
	running map[int]bool // ranks whose functions have not reported done or error
	failed  map[int]bool // ranks that reported an error (or were turned into one)
	stopped bool         // cancelled by the master, a dead peer or a failure
	// survivable: the master decides what a dead peer means for the
	// stage (its tables are replicated), so the slave does not fail it.
	survivable bool
}

// EventKind names what happened.
type EventKind int

// Kinds of Event.
const (
	EvCreateTask   EventKind = iota + 1 // the master created the task's tables here
	EvStartStage                        // start Ranks of a stage
	EvEndStage                          // the stage ended normally
	EvStopStage                         // the master stops the stage's workers
	EvDropTask                          // the task is dropped or aborted (Reason)
	EvWorkerReport                      // a worker's progress, epoch, done or error (Report)
	EvPeerDead                          // slave Node died (Reason)
	EvMasterGone                        // the master is unreachable (Reason)
	EvFenced                            // the master declared this slave dead (Reason): drop everything
)

// Event is one input to Step.
type Event struct {
	Kind      EventKind
	Task      string
	Stage     int
	StageName string
	Gen       int   // generation of the stage run a worker report comes from
	Ranks     []int // EvStartStage: ranks to run here
	Workers   int   // EvStartStage: the stage's parallelism
	OneSlave  bool  // EvStartStage: the stage runs all its workers on one slave
	// Survivable (EvStartStage): the stage goes on when a peer dies
	// (proto.SlaveCtl.Survivable).
	Survivable bool
	Hosts      []string
	Node       string // EvPeerDead
	Reason     string
	Report     proto.WorkerEvent // EvWorkerReport
}

// ActionKind names what the driver must do.
type ActionKind int

// Kinds of Action.
const (
	ActLaunch      ActionKind = iota + 1 // start Ranks of Task/Stage, generation Gen
	ActCancelStage                       // cancel the stage's workers with Err as the cause
	ActCancelTask                        // cancel every worker of Task and free its state with Err
	ActPublish                           // send Event to the master
	ActLog                               // log Err (an event that is not sent, with why)
)

// Action is one output of Step.
type Action struct {
	Kind  ActionKind
	Task  string
	Stage int
	Gen   int
	Ranks []int
	Err   error
	Event proto.WorkerEvent
}

// Errors callers test for.
var (
	ErrUnknownTask  = errors.New("unknown task")
	ErrUnknownStage = errors.New("unknown stage")
	ErrRunning      = errors.New("stage already running")
)

// NewControl returns the control state of a slave with slots worker slots.
func NewControl(slots int) *Control {
	return &Control{slots: slots, tasks: map[string]*ctlTask{}}
}

// errStageStopped is the cause of a stage's workers' cancellation when the
// master stopped the stage (an auto-parallelism trial ended, another
// worker failed).
var errStageStopped = errors.New("stage stopped by the master")

// Step applies one event and returns what the driver must do. An error
// means the event was refused (a bad request, a double start, an unknown
// task); the state is then unchanged.
func (c *Control) Step(ev Event) ([]Action, error) {
	switch ev.Kind {
	case EvCreateTask:
		c.task(ev.Task)
		return nil, nil
	case EvStartStage:
		return c.start(ev)
	case EvEndStage, EvStopStage:
		t := c.tasks[ev.Task]
		if t == nil {
			return nil, fmt.Errorf("task %s: %w on slave", ev.Task, ErrUnknownTask)
		}
		st := t.stages[ev.Stage]
		if st == nil {
			return nil, fmt.Errorf("task %s stage %d: %w on slave", ev.Task, ev.Stage, ErrUnknownStage)
		}
		if ev.Kind == EvEndStage {
			delete(t.stages, ev.Stage)
			return []Action{{Kind: ActCancelStage, Task: ev.Task, Stage: ev.Stage, Gen: st.gen}}, nil
		}
		st.stopped = true
		return []Action{{Kind: ActCancelStage, Task: ev.Task, Stage: ev.Stage, Gen: st.gen, Err: errStageStopped}}, nil
	case EvDropTask:
		reason := ev.Reason
		if reason == "" {
			reason = "task dropped by the master"
		}
		delete(c.tasks, ev.Task)
		// Dropping is idempotent: the driver frees the KV state and caches
		// even for a task whose workers never ran here.
		return []Action{{Kind: ActCancelTask, Task: ev.Task, Err: errors.New(reason)}}, nil
	case EvWorkerReport:
		return c.report(ev)
	case EvPeerDead:
		return c.peerDead(ev), nil
	case EvMasterGone, EvFenced:
		var out []Action
		for _, id := range slices.Sorted(maps.Keys(c.tasks)) {
			err := fmt.Errorf("the master is gone: %s", ev.Reason)
			if ev.Kind == EvFenced {
				err = fmt.Errorf("fenced: %s; its tasks are given up", ev.Reason)
			}
			out = append(out, Action{Kind: ActCancelTask, Task: id, Err: err})
		}
		clear(c.tasks)
		return out, nil
	}
	return nil, fmt.Errorf("slave control: unknown event kind %d", ev.Kind)
}

func (c *Control) task(id string) *ctlTask {
	t := c.tasks[id]
	if t == nil {
		t = &ctlTask{stages: map[int]*ctlStage{}}
		c.tasks[id] = t
	}
	return t
}

func (c *Control) start(ev Event) ([]Action, error) {
	if ev.Task == "" || ev.Stage < 0 {
		return nil, errors.New("start_workers without a task or with a bad stage")
	}
	if len(ev.Ranks) == 0 {
		return nil, fmt.Errorf("task %s stage %d: start_workers with no ranks", ev.Task, ev.Stage)
	}
	if len(ev.Ranks) > c.slots {
		return nil, fmt.Errorf("asked for %d workers but the slave has %d slots", len(ev.Ranks), c.slots)
	}
	if ev.OneSlave && len(ev.Ranks) != ev.Workers {
		return nil, fmt.Errorf("stage %s runs all its %d workers on one slave, got %d here", ev.StageName, ev.Workers, len(ev.Ranks))
	}
	seen := map[int]bool{}
	for _, r := range ev.Ranks {
		if r < 0 || (ev.Workers > 0 && r >= ev.Workers) || seen[r] {
			return nil, fmt.Errorf("task %s stage %d: bad or repeated rank %d in %v (stage has %d workers)", ev.Task, ev.Stage, r, ev.Ranks, ev.Workers)
		}
		seen[r] = true
	}
	t := c.task(ev.Task)
	if old := t.stages[ev.Stage]; old != nil && !old.stopped && len(old.running) > 0 {
		return nil, fmt.Errorf("task %s stage %d (%s): %w on this slave (ranks %v); stop it first", ev.Task, ev.Stage, ev.StageName, ErrRunning, sortedKeys(old.running))
	}
	c.gen++
	st := &ctlStage{name: ev.StageName, gen: c.gen, hosts: slices.Clone(ev.Hosts), running: map[int]bool{}, failed: map[int]bool{},
		survivable: ev.Survivable}
	for _, r := range ev.Ranks {
		st.running[r] = true
	}
	t.stages[ev.Stage] = st
	return []Action{{Kind: ActLaunch, Task: ev.Task, Stage: ev.Stage, Gen: st.gen, Ranks: slices.Clone(ev.Ranks)}}, nil
}

func sortedKeys(m map[int]bool) []int {
	out := slices.Collect(maps.Keys(m))
	sort.Ints(out)
	return out
}

// report checks a worker's report and passes it on.
func (c *Control) report(ev Event) ([]Action, error) {
	r := ev.Report
	t := c.tasks[r.Task]
	if t == nil {
		return nil, fmt.Errorf("%s report of task %s stage %d worker %d: %w on slave (dropped already?)", r.Kind, r.Task, r.Stage, r.Rank, ErrUnknownTask)
	}
	st := t.stages[r.Stage]
	if st == nil || st.gen != ev.Gen {
		return nil, fmt.Errorf("%s report of task %s stage %d worker %d: %w (ended or restarted)", r.Kind, r.Task, r.Stage, r.Rank, ErrUnknownStage)
	}
	if !st.running[r.Rank] {
		return nil, fmt.Errorf("%s report of task %s stage %d worker %d: the worker has already ended", r.Kind, r.Task, r.Stage, r.Rank)
	}
	var out []Action
	if r.Kind != proto.WorkerError {
		if err := nonFinite(st.name, r); err != nil {
			r = proto.WorkerEvent{Task: r.Task, Stage: r.Stage, Rank: r.Rank, Slave: r.Slave, Instance: r.Instance, Kind: proto.WorkerError, Error: err.Error()}
			// The function may still run and report: stop it, it is failed.
			st.stopped = true
			out = append(out, Action{Kind: ActCancelStage, Task: r.Task, Stage: r.Stage, Gen: st.gen, Err: err})
		}
	}
	switch r.Kind {
	case proto.WorkerDone:
		delete(st.running, r.Rank)
	case proto.WorkerError:
		delete(st.running, r.Rank)
		st.failed[r.Rank] = true
	}
	return append([]Action{{Kind: ActPublish, Task: r.Task, Stage: r.Stage, Gen: st.gen, Event: r}}, out...), nil
}

// nonFinite reports the first NaN or infinite number of a report.
func nonFinite(stage string, r proto.WorkerEvent) error {
	where := fmt.Sprintf("stage %s worker %d", stage, r.Rank)
	if r.Kind == proto.WorkerEpoch {
		where += fmt.Sprintf(" epoch %d", r.Epoch)
	}
	bad := func(name string, v float64) error {
		what := "NaN"
		if math.IsInf(v, 0) {
			what = "infinite"
		}
		return fmt.Errorf("%s: %s is %s: the learning rate is likely too large", where, name, what)
	}
	if math.IsNaN(r.LossSum) || math.IsInf(r.LossSum, 0) {
		return bad("loss", r.LossSum)
	}
	if math.IsNaN(r.Seconds) || math.IsInf(r.Seconds, 0) {
		return bad("seconds", r.Seconds)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Metrics)) {
		if v := r.Metrics[k]; math.IsNaN(v) || math.IsInf(v, 0) {
			return bad(k, v)
		}
	}
	return nil
}

// peerDead fails every live stage whose shards live on the dead node: its
// workers would otherwise wait for answers that never come. A survivable
// stage is left alone: its shards have backups, and the master counts the
// dead node's workers out and re-runs their blocks.
func (c *Control) peerDead(ev Event) []Action {
	var out []Action
	for _, id := range slices.Sorted(maps.Keys(c.tasks)) {
		t := c.tasks[id]
		for _, k := range slices.Sorted(maps.Keys(t.stages)) {
			st := t.stages[k]
			if st.stopped || st.survivable || len(st.running) == 0 || !slices.Contains(st.hosts, ev.Node) {
				continue
			}
			st.stopped = true
			err := fmt.Errorf("task %s stage %d (%s): slave %s holding its shards died", id, k, st.name, ev.Node)
			if ev.Reason != "" {
				err = fmt.Errorf("%w: %s", err, ev.Reason)
			}
			out = append(out, Action{Kind: ActCancelStage, Task: id, Stage: k, Gen: st.gen, Err: err})
		}
	}
	return out
}

// Running lists the ranks of a stage still running here, for status and tests.
func (c *Control) Running(task string, stage int) []int {
	if t := c.tasks[task]; t != nil {
		if st := t.stages[stage]; st != nil {
			return sortedKeys(st.running)
		}
	}
	return nil
}

// Tasks lists the tasks the slave knows.
func (c *Control) Tasks() []string { return slices.Sorted(maps.Keys(c.tasks)) }
