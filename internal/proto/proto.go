// Package proto holds the JSON control-plane messages between the master,
// slaves and clients. The data plane (parameters) uses kvstore's binary
// codec instead; nothing here is on a hot path.
package proto

import (
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/master/membership"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// JoinRequest is a slave announcing itself.
type JoinRequest struct {
	ID    string `json:"id"`
	Host  string `json:"host"`
	Slots int    `json:"slots"`
	PID   int    `json:"pid"`
	// Instance names this incarnation of the slave: drawn at start and
	// again when the slave must rejoin after being declared dead.
	Instance string `json:"instance"`
}

// JoinReply tells a slave how often to beat.
type JoinReply struct {
	OK        bool          `json:"ok"`
	Error     string        `json:"error,omitempty"`
	Heartbeat time.Duration `json:"heartbeat"`
	// Instance identifies this run of the master; DeadAfter is how long
	// a slave waits without a MasterAlive before it drops its tasks.
	Instance  string        `json:"instance,omitempty"`
	DeadAfter time.Duration `json:"dead_after,omitempty"`
	// Epoch is the membership epoch of the admission and Incarnation the
	// number it gave this slave (carried in its KV requests for fencing).
	Epoch       uint64 `json:"epoch,omitempty"`
	Incarnation uint64 `json:"incarnation,omitempty"`
	// InUse (a refusal): a live instance holds the slave's id. DeadAfter
	// then says how long that instance may stay silent before it is
	// declared dead and the id is free: a slave restarted before its
	// old process was declared dead asks again until then.
	InUse bool `json:"in_use,omitempty"`
}

// Membership is the master's broadcast of the live slaves (subject
// Membership), sent at every change of the membership epoch and again
// every second, since the bus may lose a message. Master names the
// master's instance: epochs count per instance of the master.
type Membership struct {
	Master string `json:"master"`
	membership.View
}

// Leave is a slave shutting down cleanly: it is removed from the
// membership without being reported dead.
type Leave struct {
	ID       string `json:"id"`
	Instance string `json:"instance"`
}

// MasterAlive is the master's periodic sign of life to its slaves. A
// slave that hears none for DeadAfter, or hears another instance, drops
// the tasks of the master it joined (no one would collect their results).
type MasterAlive struct {
	Instance string `json:"instance"`
}

// Heartbeat is a slave's periodic sign of life. It repeats the join
// request so a master that restarted, or that declared the slave dead
// during a network blip, can take it back without a new join.
type Heartbeat struct {
	ID   string      `json:"id"`
	Join JoinRequest `json:"join"`
	// Lingering is how many worker slots are still taken by workers whose
	// stage ended or was cancelled a while ago (a stage function that
	// ignores its context): the master does not hand them out again until
	// those workers return.
	Lingering int `json:"lingering,omitempty"`
}

// SubmitRequest sends a task to the master.
type SubmitRequest struct {
	Task tasks.MultiStageTask `json:"task"`
	// Resume is a checkpoint directory: the master resumes the task of
	// its newest valid checkpoint (Task then carries only the ID to use).
	Resume string `json:"resume,omitempty"`
}

// SubmitReply acknowledges a submission.
type SubmitReply struct {
	ID    string `json:"id,omitempty"`
	Error string `json:"error,omitempty"`
	// Warnings are what a resume skipped (newer checkpoints that were
	// torn or corrupt), each naming its file.
	Warnings []string `json:"warnings,omitempty"`
	// ExternalBus: the master uses an external NATS server (see
	// status.Cluster.ExternalBus).
	ExternalBus bool `json:"external_bus,omitempty"`
}

// StatusRequest asks for one task ("" for all).
type StatusRequest struct {
	ID string `json:"id,omitempty"`
	// A page of the task list (ID empty): at most Limit tasks (0: all
	// that fit one message), the newest first dropped last, submitted
	// before task Before ("" = the newest). The reply's Omitted counts the
	// older tasks left out: ask again with Before = the oldest task shown.
	Limit  int    `json:"limit,omitempty"`
	Before string `json:"before,omitempty"`
}

// StatusReply answers a StatusRequest.
type StatusReply struct {
	status.Cluster
	Error string `json:"error,omitempty"`
	// Unknown: the task asked for is not one the master knows, nor one of
	// its previous run's that it is still resuming.
	Unknown bool `json:"unknown,omitempty"`
}

// CancelRequest stops a task.
type CancelRequest struct {
	ID string `json:"id"`
	// Checkpoint stops the task at its next consistent point after
	// writing a checkpoint (tasks with [checkpoint]); otherwise at once.
	Checkpoint bool `json:"checkpoint,omitempty"`
}

// Kinds of WorkerEvent.
const (
	WorkerProgress = "progress" // samples and loss since the last report
	WorkerEpoch    = "epoch"    // an epoch's metrics
	WorkerDone     = "done"     // the stage function returned nil
	WorkerError    = "error"    // the stage function failed
	// ShardLost is a slave's report that a shard of the task's replicated
	// tables lost every complete copy (Error names table and shard): the
	// task cannot go on. Rank and Stage are not set.
	ShardLost = "shard_lost"
)

// WorkerEvent is a worker telling the master what happened.
type WorkerEvent struct {
	Task  string `json:"task"`
	Stage int    `json:"stage"`
	Rank  int    `json:"rank"`
	Slave string `json:"slave"`
	// Instance is the slave's incarnation: events of a fenced one are
	// refused by the master.
	Instance string             `json:"instance,omitempty"`
	Kind     string             `json:"kind"` // one of the Worker* kinds
	Samples  int64              `json:"samples,omitempty"`
	LossSum  float64            `json:"loss_sum,omitempty"`
	Epoch    int                `json:"epoch,omitempty"`
	Seconds  float64            `json:"seconds,omitempty"`
	Metrics  map[string]float64 `json:"metrics,omitempty"`
	Error    string             `json:"error,omitempty"`
	// Lost names the slave whose loss made the worker fail (its KV
	// requests to it went unanswered), if that is why.
	Lost string `json:"lost,omitempty"`
	// BadLines are the first malformed lines skipped (on_error = "skip").
	BadLines []string `json:"bad_lines,omitempty"`
}

// BarrierRequest is a worker arriving at its Seq-th barrier of a stage;
// the master answers (CtlReply) once every worker of the stage arrived.
type BarrierRequest struct {
	Task  string `json:"task"`
	Stage int    `json:"stage"`
	Rank  int    `json:"rank"`
	Seq   int    `json:"seq"`
	// Epoch > 0 marks the barrier that ends the worker's epoch Epoch
	// (a checkpoint point, SlaveCtl.EpochBarrier).
	Epoch int `json:"epoch,omitempty"`
}

// BlockRequest asks the master's FileAssigner for a worker's next block
// of Epoch; with Confirm set it instead reports that the worker processed
// every record of that block (in stages that survive a slave's death, so
// the block is not re-run when the worker dies), and with Abandon that the
// worker closed its pass of Epoch early (its unprocessed blocks are
// nobody's to wait for).
type BlockRequest struct {
	Task  string `json:"task"`
	Stage int    `json:"stage"`
	Input string `json:"input"`
	Rank  int    `json:"rank"`
	Epoch int    `json:"epoch"`
	// Slave and Instance name the asking incarnation: a fenced one (a
	// slave declared dead) is refused.
	Slave    string           `json:"slave,omitempty"`
	Instance string           `json:"instance,omitempty"`
	Confirm  *datastore.Block `json:"confirm,omitempty"`
	Abandon  bool             `json:"abandon,omitempty"`
	// Seq numbers a rank's requests for a block (1, 2, ...; 0: not
	// numbered): a request asked again with the same Seq (its answer was
	// lost in a bus outage) gets the same answer, not a second block.
	Seq int64 `json:"seq,omitempty"`
}

// BlockReply carries the next block, or Done. Retry says the epoch has no
// block to hand out now but blocks handed to other workers may still come
// back (their slave may die before they finish them): ask again.
type BlockReply struct {
	Block datastore.Block `json:"block"`
	Local bool            `json:"local"`
	Done  bool            `json:"done"`
	Retry bool            `json:"retry,omitempty"`
	Error string          `json:"error,omitempty"`
	// Stopped: the stage is not running any more (it ended or was
	// stopped: a cancel, a Ctrl-C, another worker's failure); the worker
	// stops too, which is not an error of its own.
	Stopped bool `json:"stopped,omitempty"`
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
	// OpFinishRanks counts Ranks (the workers of a slave that died) out
	// of the stage's consistency gates on the slave, so the survivors are
	// not held back waiting for clocks that will never come.
	OpFinishRanks = "finish_ranks"
	// OpHoldsTask asks, after the master found it did not run for longer
	// than failure_timeout, whether the slave still runs Task: it fails
	// if the slave stopped it for want of word from the master. The
	// question is itself a sign of life.
	OpHoldsTask = "holds_task"
)

// SlaveCtl is a control request from the master to a slave.
type SlaveCtl struct {
	Op string `json:"op"`
	// ReqID names the request: one sent again (the master reconnected to
	// the bus while it waited, so the request or its answer may be lost)
	// carries the same ReqID, and the slave answers it as it answered the
	// first without doing it twice.
	ReqID       string                `json:"req_id,omitempty"`
	Task        string                `json:"task"`
	Stage       int                   `json:"stage"`
	Tables      []kvstore.Placement   `json:"tables,omitempty"`
	Consistency kvstore.Consistency   `json:"consistency"`
	Workers     int                   `json:"workers,omitempty"` // stage parallelism
	Ranks       []int                 `json:"ranks,omitempty"`   // ranks to run on this slave
	Spec        *tasks.MultiStageTask `json:"spec,omitempty"`
	Hosts       []string              `json:"hosts,omitempty"` // every shard host of the task
	Reason      string                `json:"reason,omitempty"`
	// DeadHosts (start_workers) are the shard hosts that died since the
	// task's tables were placed: a slave hosting none of its shards (it
	// joined, or rejoined as a fresh instance, later) routes around them.
	DeadHosts []string `json:"dead_hosts,omitempty"`
	// Retain keeps a one-slave stage's model in the slave's memory for the
	// next stage instead of writing it back (direct model transfer).
	Retain bool `json:"retain,omitempty"`
	// TransferFrom names the slave holding the previous stage's retained
	// model; the stage takes it from there instead of the KV-store.
	TransferFrom string `json:"transfer_from,omitempty"`
	// StartEpoch is how many epochs of the stage a resumed task already
	// did (tasks.Info.StartEpoch).
	StartEpoch int `json:"start_epoch,omitempty"`
	// EpochBarrier makes every worker's ReportEpoch a barrier at which the
	// master may take a checkpoint (tasks with [checkpoint], ps stages).
	EpochBarrier bool `json:"epoch_barrier,omitempty"`
	// Survivable: the stage goes on when a slave dies (its tables are
	// replicated), so the slave does not fail it when a peer dies, and the
	// master decides; ps workers of such a stage confirm every block they
	// processed (BlockRequest.Confirm).
	Survivable bool `json:"survivable,omitempty"`
	// Instance is the incarnation of the slave the request is meant
	// for; another incarnation refuses it (it was sent before a rejoin).
	Instance string `json:"instance,omitempty"`
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
	// Instance is the answering slave's incarnation; the master refuses
	// answers of a fenced one.
	Instance string `json:"instance,omitempty"`
	// Live lists the stage's live ranks in a barrier's answer once a
	// worker died (nil: every rank lives).
	Live []int `json:"live,omitempty"`
	// Lingering is the answering slave's proto.Heartbeat.Lingering.
	Lingering int `json:"lingering,omitempty"`
	// Unknown: a cancel's task is not one the master knows (as in
	// StatusReply).
	Unknown bool `json:"unknown,omitempty"`
	// Stopped (a barrier's answer with Error): the stage is not running
	// any more, so its waiting worker was stopped, not failed.
	Stopped bool `json:"stopped,omitempty"`
}
