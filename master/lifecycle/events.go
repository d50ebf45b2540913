package lifecycle

import (
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/status"
)

// Event is something that happened to a running stage.
type Event interface{ isEvent() }

// Begin starts the run on the granted placement at Now: start requests
// go to every slave of the placement.
type Begin struct{ Now time.Time }

// Acked is a slave's answer to a control request the Stage asked for (Op is
// proto.OpStartWorkers or proto.OpStopStage); Err is nil on success.
type Acked struct {
	Slave string
	Op    string
	Err   error
	Now   time.Time
}

// WorkerProgress is a worker's periodic report: samples processed since
// its last report and the sum of their losses.
type WorkerProgress struct {
	Stage, Rank int
	Slave       string
	Epoch       int // 0: not reported
	Samples     int64
	LossSum     float64
}

// WorkerEpoch is a worker finishing an epoch with its metrics.
type WorkerEpoch struct {
	Stage, Rank, Epoch int
	Slave              string
	Seconds            float64
	Metrics            map[string]float64
}

// WorkerDone is a worker returning from the stage function.
type WorkerDone struct {
	Stage, Rank int
	Slave       string
	Seconds     float64
	Metrics     map[string]float64
	BadLines    []string
	Now         time.Time // when the master received the report
}

// WorkerFailed is a worker whose stage function returned an error (or was
// stopped at the end of a trial).
type WorkerFailed struct {
	Stage, Rank int
	Slave       string
	Err         string
	// Lost is the slave whose loss failed the worker (its KV requests
	// there went unanswered), if that is why.
	Lost string
}

// BarrierArrived is a worker waiting at its Seq-th barrier; Waiter is the
// driver's handle to answer it (a request message), opaque to the Stage.
type BarrierArrived struct {
	Stage, Rank, Seq int
	Waiter           any
}

// Tick is the clock: progress is published and trial deadlines are checked
// against Now. Handed is the share of the current epoch's input blocks
// already handed out to workers (0 when unknown); it refines the done
// fraction between epoch reports.
type Tick struct {
	Now    time.Time
	Handed float64
}

// Cancel ends the stage with Err as it is (the user cancelled, the master
// shuts down, the task failed elsewhere).
type Cancel struct{ Err error }

// SlaveDead reports that the failure detector declared Slave dead (or it
// left). A stage that cannot survive it (Config.Survival) fails with Err
// and the reason; a survivable one counts the slave's workers out and goes
// on (see failover.go).
type SlaveDead struct {
	Slave string
	Err   error
	// Known says an earlier stage of the task reported this death: a
	// slave that only held shards is counted out quietly (no failover
	// event or result again in every later stage).
	Known bool
	// Left: the slave left the cluster (a clean shutdown), which the
	// stage's events and result say instead of "died".
	Left bool
}

// BlocksReleased is the driver's answer to ReleaseBlocks: Blocks input
// blocks of the dead Slave's workers went back to the queue.
type BlocksReleased struct {
	Slave  string
	Blocks int
}

func (Begin) isEvent()          {}
func (Acked) isEvent()          {}
func (WorkerProgress) isEvent() {}
func (WorkerEpoch) isEvent()    {}
func (WorkerDone) isEvent()     {}
func (WorkerFailed) isEvent()   {}
func (BarrierArrived) isEvent() {}
func (Tick) isEvent()           {}
func (Cancel) isEvent()         {}
func (SlaveDead) isEvent()      {}
func (BlocksReleased) isEvent() {}

// FromWorker turns a worker's wire event, received at now, into a Stage
// event (nil for an unknown kind).
func FromWorker(ev proto.WorkerEvent, now time.Time) Event {
	switch ev.Kind {
	case proto.WorkerProgress:
		return WorkerProgress{Stage: ev.Stage, Rank: ev.Rank, Slave: ev.Slave, Epoch: ev.Epoch, Samples: ev.Samples, LossSum: ev.LossSum}
	case proto.WorkerEpoch:
		return WorkerEpoch{Stage: ev.Stage, Rank: ev.Rank, Slave: ev.Slave, Epoch: ev.Epoch, Seconds: ev.Seconds, Metrics: ev.Metrics}
	case proto.WorkerDone:
		return WorkerDone{Stage: ev.Stage, Rank: ev.Rank, Slave: ev.Slave, Seconds: ev.Seconds, Metrics: ev.Metrics, BadLines: ev.BadLines, Now: now}
	case proto.WorkerError:
		return WorkerFailed{Stage: ev.Stage, Rank: ev.Rank, Slave: ev.Slave, Err: ev.Error, Lost: ev.Lost}
	}
	return nil
}

// Action is something the driver must do for the Stage.
type Action interface{ isAction() }

// StartWorkers asks Slave to start the stage's workers of these Ranks; the
// driver answers with Acked{Op: proto.OpStartWorkers}.
type StartWorkers struct {
	Slave string
	Ranks []int
}

// StopWorkers asks Slave to stop the stage's workers (end of a trial); the
// driver answers with Acked{Op: proto.OpStopStage}.
type StopWorkers struct{ Slave string }

// Publish sends a task event of Kind (status.EventStatus, EventProgress,
// EventEpoch, EventFailover) to the task's followers; Progress is the
// stage's progress it reports (Stage.Progress), Epoch is set for
// EventEpoch, Message for EventFailover.
type Publish struct {
	Kind     string
	Progress status.Progress
	Epoch    *status.Epoch
	Message  string
}

// ReleaseBarrier answers Waiters: OK when Err is empty, otherwise with Err.
// Live lists the stage's live ranks once a worker died (nil: all of them
// live), so each worker can take its share of the work among the living
// (tasks.Info.Share).
type ReleaseBarrier struct {
	Waiters []any
	Err     string
	Live    []int
	// Repeat: the one waiter asked again for a barrier released already
	// (its answer was lost on the bus); it is answered, and nothing that
	// the barrier's release did (an epoch's end) is done again.
	Repeat bool
	// Stopped (with Err): the stage is not running (it ended, or the
	// barrier is another stage's); its waiters were stopped, not failed.
	Stopped bool
}

// ReleaseBlocks asks the driver to put the input blocks handed to Ranks
// (the workers of the dead Slave) and not confirmed back in their epochs'
// queues, in every epoch and input, and to refuse those ranks from then
// on. The driver answers with BlocksReleased.
type ReleaseBlocks struct {
	Slave string
	Ranks []int
}

// FinishRanks asks the driver to tell Slaves (the stage's live workers'
// slaves and shard hosts) to count Ranks out of the stage's consistency
// gates (proto.OpFinishRanks), so the survivors' clocks are not held back
// by workers that will never tick again.
type FinishRanks struct {
	Stage  int
	Slaves []string
	Ranks  []int
}

// StageFinished ends the run: Err is nil and Result complete when every
// worker finished (Stopped when a trial was cut short), otherwise Err says
// why the stage failed.
type StageFinished struct {
	Result  status.StageResult
	Stopped bool
	Err     error
}

func (StartWorkers) isAction()   {}
func (StopWorkers) isAction()    {}
func (Publish) isAction()        {}
func (ReleaseBarrier) isAction() {}
func (ReleaseBlocks) isAction()  {}
func (FinishRanks) isAction()    {}
func (StageFinished) isAction()  {}
