// Package proto holds the JSON control-plane messages between the master,
// slaves and clients. The data plane (parameters) uses kvstore's binary
// codec instead; nothing here is on a hot path.
package proto

import (
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// JoinRequest is a slave announcing itself.
type JoinRequest struct {
	ID    string `json:"id"`
	Host  string `json:"host"`
	Slots int    `json:"slots"`
	PID   int    `json:"pid"`
}

// JoinReply tells a slave how often to beat.
type JoinReply struct {
	OK        bool          `json:"ok"`
	Error     string        `json:"error,omitempty"`
	Heartbeat time.Duration `json:"heartbeat"`
}

// Heartbeat is a slave's periodic sign of life. It repeats the join
// request so a master that restarted, or that declared the slave dead
// during a network blip, can take it back without a new join.
type Heartbeat struct {
	ID   string      `json:"id"`
	Join JoinRequest `json:"join"`
}

// SubmitRequest sends a task to the master.
type SubmitRequest struct {
	Task tasks.MultiStageTask `json:"task"`
}

// SubmitReply acknowledges a submission.
type SubmitReply struct {
	ID    string `json:"id,omitempty"`
	Error string `json:"error,omitempty"`
}

// StatusRequest asks for one task ("" for all).
type StatusRequest struct {
	ID string `json:"id,omitempty"`
}

// StatusReply lists tasks and slaves.
type StatusReply struct {
	Tasks  []TaskStatus  `json:"tasks"`
	Slaves []SlaveStatus `json:"slaves"`
	Policy string        `json:"policy"`
	Error  string        `json:"error,omitempty"`
}

// CancelRequest stops a task.
type CancelRequest struct {
	ID string `json:"id"`
}

// SlaveStatus is one slave as the master sees it.
type SlaveStatus struct {
	ID       string    `json:"id"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Slots    int       `json:"slots"`
	Free     int       `json:"free"`
	Alive    bool      `json:"alive"`
	LastSeen time.Time `json:"last_seen"`
}

// Task states.
const (
	Queued    = "queued"
	Running   = "running"
	Done      = "done"
	Failed    = "failed"
	Cancelled = "cancelled"
)

// TaskStatus is a task's lifecycle as the master tracks it.
type TaskStatus struct {
	ID        string         `json:"id"`
	Name      string         `json:"name"`
	State     string         `json:"state"`
	Reason    string         `json:"reason,omitempty"`
	Stage     int            `json:"stage"`  // index of the current (or last) stage
	Stages    int            `json:"stages"` // number of stages
	StageName string         `json:"stage_name,omitempty"`
	Priority  int            `json:"priority"`
	Submitted time.Time      `json:"submitted"`
	Started   time.Time      `json:"started,omitempty"`
	Finished  time.Time      `json:"finished,omitempty"`
	Slots     map[string]int `json:"slots,omitempty"` // worker slots held now, per slave
	Progress  Progress       `json:"progress"`
	Results   []StageResult  `json:"results,omitempty"`
	Output    string         `json:"output,omitempty"`
}

// Progress of the current stage.
type Progress struct {
	Samples       int64   `json:"samples"`
	Loss          float64 `json:"loss"` // mean loss over the last reports
	SamplesPerSec float64 `json:"samples_per_sec"`
	Epoch         int     `json:"epoch"`
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
	Epochs        []EpochResult      `json:"epochs,omitempty"`
	Metrics       map[string]float64 `json:"metrics,omitempty"` // summed worker counters
	Note          string             `json:"note,omitempty"`
	WorkerStats   []WorkerStat       `json:"worker_stats,omitempty"`
	BadLines      []string           `json:"bad_lines,omitempty"` // first malformed lines skipped
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
}

// EpochResult is an epoch's metrics summed over a stage's workers.
type EpochResult struct {
	Stage   int                `json:"stage"`
	Epoch   int                `json:"epoch"`
	Workers int                `json:"workers"` // workers that reported
	Seconds float64            `json:"seconds"` // slowest worker's epoch time
	Metrics map[string]float64 `json:"metrics"`
}

// TaskEvent is published on a task's events subject.
type TaskEvent struct {
	Kind   string       `json:"kind"` // status, progress, epoch, done, failed
	Status TaskStatus   `json:"status"`
	Epoch  *EpochResult `json:"epoch,omitempty"`
}

// WorkerEvent is a worker telling the master what happened.
type WorkerEvent struct {
	Task    string             `json:"task"`
	Stage   int                `json:"stage"`
	Rank    int                `json:"rank"`
	Slave   string             `json:"slave"`
	Kind    string             `json:"kind"` // progress, epoch, done, error
	Samples int64              `json:"samples,omitempty"`
	LossSum float64            `json:"loss_sum,omitempty"`
	Epoch   int                `json:"epoch,omitempty"`
	Seconds float64            `json:"seconds,omitempty"`
	Metrics map[string]float64 `json:"metrics,omitempty"`
	Error   string             `json:"error,omitempty"`
	// BadLines are the first malformed lines skipped (on_error = "skip").
	BadLines []string `json:"bad_lines,omitempty"`
}

// BlockRequest asks the master's FileAssigner for a worker's next block.
type BlockRequest struct {
	Task  string `json:"task"`
	Stage int    `json:"stage"`
	Input string `json:"input"`
	Rank  int    `json:"rank"`
	Epoch int    `json:"epoch"`
}

// BlockReply carries the next block, or Done.
type BlockReply struct {
	Block datastore.Block `json:"block"`
	Local bool            `json:"local"`
	Done  bool            `json:"done"`
	Error string          `json:"error,omitempty"`
}

// Slave control operations.
const (
	OpCreateTables = "create_tables"
	OpPrepareStage = "prepare_stage"
	OpStartWorkers = "start_workers"
	OpEndStage     = "end_stage"
	OpStopStage    = "stop_stage" // cancel a stage's workers (end of an auto trial)
	OpAbort        = "abort"
	OpDropTask     = "drop_task"
)

// SlaveCtl is a control request from the master to a slave.
type SlaveCtl struct {
	Op          string                `json:"op"`
	Task        string                `json:"task"`
	Stage       int                   `json:"stage"`
	Tables      []kvstore.Placement   `json:"tables,omitempty"`
	Consistency kvstore.Consistency   `json:"consistency"`
	Workers     int                   `json:"workers,omitempty"` // stage parallelism
	Ranks       []int                 `json:"ranks,omitempty"`   // ranks to run on this slave
	Spec        *tasks.MultiStageTask `json:"spec,omitempty"`
	Hosts       []string              `json:"hosts,omitempty"` // every shard host of the task
	Reason      string                `json:"reason,omitempty"`
	// Retain keeps a one-slave stage's model in the slave's memory for the
	// next stage instead of writing it back (direct model transfer).
	Retain bool `json:"retain,omitempty"`
	// TransferFrom names the slave holding the previous stage's retained
	// model; the stage takes it from there instead of the KV-store.
	TransferFrom string `json:"transfer_from,omitempty"`
}

// ModelInfo describes a retained model for a direct transfer.
type ModelInfo struct {
	Tables []RetainedTable `json:"tables"`
	Error  string          `json:"error,omitempty"`
}

// RetainedTable is one table of a retained model.
type RetainedTable struct {
	Name     string `json:"name"`
	Values   int    `json:"values"`
	Checksum uint32 `json:"checksum"` // CRC-32C of the values' float64 bits, little-endian
}

// CtlReply answers a SlaveCtl.
type CtlReply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}
