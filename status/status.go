// Package status holds what a flexps master tells its clients about tasks
// and slaves: a task's lifecycle state, the progress of its current stage,
// per-stage and per-epoch results, and the events a follower receives while
// a task runs. These are plain data types, encoded as JSON on the bus; a
// program outside this module names them when it follows a task through
// engine.Client (SubmitAndWait, Follow, Status).
//
// A task moves Queued -> Running -> Done | Failed | Cancelled. While it
// runs, its followers get an Event of kind EventStatus when a stage starts,
// EventProgress about every half second, EventEpoch when every worker of a
// stage reported an epoch, and finally EventDone or EventFailed.
package status

import (
	"errors"
	"time"
)

// States of a task.
const (
	Queued    = "queued"
	Running   = "running"
	Done      = "done"
	Failed    = "failed"
	Cancelled = "cancelled"
)

// Kinds of Event.
const (
	EventStatus   = "status"   // the task's state or stage changed
	EventProgress = "progress" // samples and loss of the running stage
	EventEpoch    = "epoch"    // every worker of a stage reported an epoch; Event.Epoch is set
	EventDone     = "done"     // the task finished successfully
	EventFailed   = "failed"   // the task failed or was cancelled
	// EventWaiting: the task's queued stage cannot start even with every
	// slot free (slaves died or left); Event.Message says why. It waits
	// until enough slaves are back.
	EventWaiting = "waiting"
	// EventFailover: a slave of the running stage died and the stage goes
	// on without it; Event.Message says who died and where its work went.
	EventFailover = "failover"
)

// Task is a task's lifecycle as the master tracks it.
type Task struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Waiting says why the queued stage cannot start even with every
	// slot free: the cluster shrank below what it asks for ("" otherwise).
	Waiting string `json:"waiting,omitempty"`
	// Queued says why a queued stage that fits the cluster has not
	// started: the slots it asks for are in use (and by which tasks), or
	// the policy starts stages queued before it first ("" otherwise).
	Queued    string         `json:"queued,omitempty"`
	Stage     int            `json:"stage"`  // index of the current (or last) stage
	Stages    int            `json:"stages"` // number of stages
	StageName string         `json:"stage_name,omitempty"`
	Priority  int            `json:"priority"`
	Submitted time.Time      `json:"submitted"`
	Started   time.Time      `json:"started,omitzero"`
	Finished  time.Time      `json:"finished,omitzero"`
	Slots     map[string]int `json:"slots,omitempty"` // worker slots held now, per live slave (see Lost)
	Progress  Progress       `json:"progress"`
	Results   []StageResult  `json:"results,omitempty"`
	// ResultsOmitted counts the first finished stages whose results were
	// left out of Results so that the task fits one bus message (a task of
	// thousands of stages); Results are the later ones.
	ResultsOmitted int    `json:"results_omitted,omitempty"`
	Output         string `json:"output,omitempty"`
	// Checkpoint is the task's newest checkpoint file ("" before the
	// first); Resumed the checkpoint the task was resumed from.
	Checkpoint string `json:"checkpoint,omitempty"`
	Resumed    string `json:"resumed,omitempty"`
	// Lost are the running stage's worker slots on slaves that died or
	// left since it started, per slave: their workers are counted out (a
	// survivable stage goes on without them) and they are not in Slots.
	Lost map[string]int `json:"lost,omitempty"`
}

// Ended reports whether the task reached a final state.
func (t Task) Ended() bool {
	return t.State == Done || t.State == Failed || t.State == Cancelled
}

// ErrTaskFailed is wrapped by Task.Err for a task that failed or was
// cancelled.
var ErrTaskFailed = errors.New("task failed")

// Err is nil for a task that is done or still going, and otherwise an
// error wrapping ErrTaskFailed with the master's reason.
func (t Task) Err() error {
	if t.State != Failed && t.State != Cancelled {
		return nil
	}
	return &TaskError{ID: t.ID, Name: t.Name, State: t.State, Reason: t.Reason}
}

// TaskError is a task that ended failed or cancelled.
type TaskError struct {
	ID, Name, State, Reason string
}

// Error says the task's state once: "task ID (NAME) failed: REASON". It
// read "task failed: task ID (NAME) failed: REASON".
func (e *TaskError) Error() string {
	return "task " + e.ID + " (" + e.Name + ") " + e.State + ": " + e.Reason
}

// Unwrap makes errors.Is(err, ErrTaskFailed) hold.
func (e *TaskError) Unwrap() error { return ErrTaskFailed }

// Progress of the current stage.
type Progress struct {
	Samples       int64   `json:"samples"`
	Loss          float64 `json:"loss"` // mean loss over the last reports
	SamplesPerSec float64 `json:"samples_per_sec"`
	Epoch         int     `json:"epoch"`  // last epoch every worker finished
	Epochs        int     `json:"epochs"` // epochs the stage plans (its "epochs" param; 0: unknown)
	// Fraction estimates how much of the stage is done, in [0, 1]: finished
	// epochs plus the share of the current epoch's input blocks handed
	// out, over Epochs (0 when unknown).
	Fraction float64 `json:"fraction"`
}

// StageResult summarizes a finished stage.
type StageResult struct {
	Index         int                `json:"index"`
	Name          string             `json:"name"`
	Func          string             `json:"func"`
	Workers       int                `json:"workers"`
	Placement     map[string]int     `json:"placement"`
	Seconds       float64            `json:"seconds"`
	WorkerSeconds float64            `json:"worker_seconds"`
	Samples       int64              `json:"samples"`
	Epochs        []Epoch            `json:"epochs,omitempty"`
	Metrics       map[string]float64 `json:"metrics,omitempty"` // summed worker counters (names in package tasks)
	Note          string             `json:"note,omitempty"`
	WorkerStats   []WorkerStat       `json:"worker_stats,omitempty"`
	BadLines      []string           `json:"bad_lines,omitempty"` // first malformed lines skipped
	// Failovers are the slaves that died during the stage while it went
	// on without them, in the order they died.
	Failovers []Failover `json:"failovers,omitempty"`
}

// Failover is a slave that died (or left) during a stage that survived it.
type Failover struct {
	Slave string `json:"slave"`
	// Ranks are the stage's workers that ran there (none: the slave only
	// held shards, which its backups serve from then on).
	Ranks []int `json:"ranks,omitempty"`
	// Blocks counts the input blocks handed to those workers and not
	// finished, which went back to the queue for the survivors to re-run.
	Blocks int `json:"blocks"`
	// Survivors is how many workers of the stage were left.
	Survivors int `json:"survivors"`
	// Left: the slave left the cluster (shut down cleanly) rather than died.
	Left bool `json:"left,omitempty"`
}

// Went says how the slave went: "left" (a clean shutdown) or "died".
func (f Failover) Went() string {
	if f.Left {
		return "left"
	}
	return "died"
}

// WorkerStat is what one worker of a stage read and how long it waited.
type WorkerStat struct {
	Rank       int     `json:"rank"`
	Slave      string  `json:"slave"`
	Seconds    float64 `json:"seconds"`
	ReadBytes  int64   `json:"read_bytes"`
	LocalBytes int64   `json:"local_bytes"`
	WaitSecs   float64 `json:"wait_seconds"`
	Blocks     int64   `json:"blocks"`
	Cached     int64   `json:"cached_blocks"`
	// Key accesses by where the key was, and relocation: keys the worker
	// localized; for the slave's first worker, the keys its slave held at
	// the end (OwnedKeys) and how many of them had moved there.
	LocalKeys  int64 `json:"local_keys,omitempty"`
	RemoteKeys int64 `json:"remote_keys,omitempty"`
	Localized  int64 `json:"localized_keys,omitempty"`
	OwnedKeys  int64 `json:"owned_keys,omitempty"`
	GuestKeys  int64 `json:"guest_keys,omitempty"`
}

// Epoch is an epoch's metrics summed over a stage's workers.
type Epoch struct {
	Stage   int                `json:"stage"`
	Epoch   int                `json:"epoch"`
	Workers int                `json:"workers"` // workers that reported
	Seconds float64            `json:"seconds"` // slowest worker's epoch time
	Metrics map[string]float64 `json:"metrics"`
}

// Event is what a follower of a task receives.
type Event struct {
	Kind   string `json:"kind"` // one of the Event* constants
	Status Task   `json:"status"`
	Epoch  *Epoch `json:"epoch,omitempty"` // set for EventEpoch
	// Message is a sentence for people (set for EventFailover).
	Message string `json:"message,omitempty"`
}

// Slave is one slave as the master sees it.
type Slave struct {
	ID    string `json:"id"`
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Slots int    `json:"slots"`
	Free  int    `json:"free"` // 0 once the slave died or left
	// Lingering slots are taken by workers of an ended or cancelled stage
	// that have not returned yet (not counted in Free).
	Lingering int  `json:"lingering,omitempty"`
	Alive     bool `json:"alive"`
	// Left is set for a slave that is not alive because it shut down
	// cleanly (it said so), not because it was declared dead.
	Left     bool      `json:"left,omitempty"`
	LastSeen time.Time `json:"last_seen"`
	// Instance and Incarnation name the slave's current (or last)
	// incarnation; a slave declared dead rejoins as a new one.
	Instance    string `json:"instance,omitempty"`
	Incarnation uint64 `json:"incarnation,omitempty"`
}

// Cluster is a master's answer to a status request: its tasks (one, or all
// in submission order), its slaves and its scheduling policy.
type Cluster struct {
	Tasks  []Task  `json:"tasks"`
	Slaves []Slave `json:"slaves"`
	Policy string  `json:"policy"`
	// Epoch is the membership epoch: it grows at every join, death and
	// leave of a slave.
	Epoch uint64 `json:"epoch"`
	// ExternalBus: the master uses an external NATS server, which it and
	// its tasks outlive (they wait for it when it is lost).
	ExternalBus bool `json:"external_bus,omitempty"`
	// Omitted counts the oldest tasks left out of an answer too large
	// for one bus message; each is still answered when asked by id.
	Omitted int `json:"omitted,omitempty"`
}
