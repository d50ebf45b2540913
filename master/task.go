package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/master/assign"
	"github.com/flexps/flexps/scheduler"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
)

var errCancelled = errors.New("cancelled by the user")

// taskRun drives one task from queue to done; its goroutine (run) owns the
// stage sequence, the rest is guarded by mu.
type taskRun struct {
	m      *Master
	spec   *tasks.MultiStageTask
	blocks map[string][]datastore.Block
	ctx    context.Context
	cancel context.CancelCauseFunc
	events chan proto.WorkerEvent
	ended  chan struct{}

	seq    int         // submission order
	active atomic.Bool // granted slots at least once (read under Master.mu)

	mu      sync.Mutex
	status  status.Task
	hosts   []string        // shard hosts
	modelAt string          // slave retaining the last stage's model (direct transfer)
	used    map[string]bool // every slave the task touched
	holding map[string]int  // slots held now

	// The running stage's barrier: workers waiting at barrier seq, answered
	// once all barWorkers of stage barStage arrived.
	barStage   int
	barWorkers int // 0: no stage is running
	barriers   map[int][]*nats.Msg
}

func newTaskRun(m *Master, spec *tasks.MultiStageTask, blocks map[string][]datastore.Block) *taskRun {
	ctx, cancel := context.WithCancelCause(m.ctx)
	return &taskRun{
		m: m, spec: spec, blocks: blocks, ctx: ctx, cancel: cancel,
		events: make(chan proto.WorkerEvent, 4096), ended: make(chan struct{}),
		used: map[string]bool{},
		status: status.Task{ID: spec.ID, Name: spec.Name, State: status.Queued, Stages: len(spec.Stages),
			Priority: spec.Priority, Submitted: time.Now(), Output: spec.Output},
	}
}

// openBarriers starts accepting barrier arrivals for stage k's workers.
func (t *taskRun) openBarriers(k, workers int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.barStage, t.barWorkers, t.barriers = k, workers, map[int][]*nats.Msg{}
}

// closeBarriers answers every worker still waiting with why the stage
// ended.
func (t *taskRun) closeBarriers(why string) {
	t.mu.Lock()
	waiting := t.barriers
	t.barWorkers, t.barriers = 0, nil
	t.mu.Unlock()
	for _, msgs := range waiting {
		for _, msg := range msgs {
			t.m.reply(msg, proto.CtlReply{Error: why})
		}
	}
}

// barrier records a worker's arrival and releases the barrier when the
// last worker of the stage arrives.
func (t *taskRun) barrier(msg *nats.Msg, req proto.BarrierRequest) {
	t.mu.Lock()
	if t.barWorkers == 0 || req.Stage != t.barStage {
		t.mu.Unlock()
		t.m.reply(msg, proto.CtlReply{Error: fmt.Sprintf("task %s: barrier of stage %d, which is not running", req.Task, req.Stage)})
		return
	}
	t.barriers[req.Seq] = append(t.barriers[req.Seq], msg)
	var release []*nats.Msg
	if len(t.barriers[req.Seq]) == t.barWorkers {
		release = t.barriers[req.Seq]
		delete(t.barriers, req.Seq)
	}
	t.mu.Unlock()
	for _, m := range release {
		t.m.reply(m, proto.CtlReply{OK: true})
	}
}

func (t *taskRun) fail(err error)      { t.cancel(err) }
func (t *taskRun) cancelRun(err error) { t.cancel(err) }

func (t *taskRun) uses(slave string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.used[slave] && t.status.State != status.Done && t.status.State != status.Failed && t.status.State != status.Cancelled
}

// touched reports whether the task ever used slave.
func (t *taskRun) touched(slave string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.used[slave]
}

// isEnded reports whether the task's goroutine finished.
func (t *taskRun) isEnded() bool {
	select {
	case <-t.ended:
		return true
	default:
		return false
	}
}

func (t *taskRun) snapshot() status.Task {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.status
	s.Slots = maps.Clone(t.holding)
	s.Results = append([]status.StageResult(nil), t.status.Results...)
	return s
}

// event hands a worker's event to the task's goroutine. Progress may be
// dropped under pressure; completion and errors are not.
func (t *taskRun) event(ev proto.WorkerEvent) {
	if ev.Kind == proto.WorkerProgress {
		select {
		case t.events <- ev:
		default:
		}
		return
	}
	select {
	case t.events <- ev:
	case <-t.ended:
	}
}

func (t *taskRun) publish(kind string, ep *status.Epoch) {
	t.m.publishTask(t.spec.ID, status.Event{Kind: kind, Status: t.snapshot(), Epoch: ep})
}

func (t *taskRun) run() {
	defer t.m.wg.Done()
	err := t.execute()
	t.mu.Lock()
	slaves := make([]string, 0, len(t.used))
	for s := range t.used {
		slaves = append(slaves, s)
	}
	t.mu.Unlock()
	sort.Strings(slaves)
	// Tell every slave involved to stop and free the task, whatever happened.
	reason := "task finished"
	if err != nil {
		reason = err.Error()
	}
	cleanup, cancel := context.WithTimeout(context.Background(), t.m.cfg.RequestTimeout)
	for _, s := range slaves {
		if !t.m.isAlive(s) {
			continue
		}
		if cerr := t.m.ctl(cleanup, s, proto.SlaveCtl{Op: proto.OpDropTask, Task: t.spec.ID, Reason: reason}); cerr != nil {
			t.m.log.Warn().Err(cerr).Str("task", t.spec.ID).Msg("could not drop task on slave")
		}
	}
	cancel()
	t.mu.Lock()
	t.status.Finished = time.Now()
	t.holding = nil
	switch {
	case err == nil:
		t.status.State = status.Done
	case errors.Is(err, errCancelled):
		t.status.State, t.status.Reason = status.Cancelled, err.Error()
	default:
		t.status.State, t.status.Reason = status.Failed, err.Error()
	}
	state := t.status.State
	t.mu.Unlock()
	close(t.ended)
	t.cancel(nil)
	// The task no longer counts as running: let waiting tasks start.
	t.m.mu.Lock()
	t.m.scheduleLocked()
	t.m.mu.Unlock()
	if err != nil {
		t.m.log.Error().Str("task", t.spec.ID).Err(err).Msg("task " + state)
		t.publish(status.EventFailed, nil)
	} else {
		t.m.log.Info().Str("task", t.spec.ID).Msg("task done")
		t.publish(status.EventDone, nil)
	}
}

func (m *Master) isAlive(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.slaves[id]
	return s != nil && s.alive
}

// cause is why the task's context ended.
func (t *taskRun) cause() error {
	if err := context.Cause(t.ctx); err != nil {
		return err
	}
	return t.ctx.Err()
}

func (t *taskRun) execute() error {
	for k := range t.spec.Stages {
		st := &t.spec.Stages[k]
		t.mu.Lock()
		t.status.Stage, t.status.StageName = k, st.Name
		t.mu.Unlock()
		workers, note := st.Workers, ""
		if st.Auto {
			best, why, res, err := t.autoTune(k, st)
			if err != nil {
				return err
			}
			if res != nil { // a trial ran the whole stage
				res.Note = why
				t.record(*res)
				continue
			}
			workers, note = best, why
		}
		placement, err := t.acquire(k, st, workers)
		if err != nil {
			return err
		}
		res, _, err := t.runStage(k, st, workers, placement, 0)
		t.releaseSlots(placement)
		if err != nil {
			return err
		}
		if note != "" && res.Note != "" {
			res.Note = note + "; " + res.Note
		} else if note != "" {
			res.Note = note
		}
		t.record(res)
	}
	return t.writeOutput()
}

func (t *taskRun) record(res status.StageResult) {
	t.mu.Lock()
	t.status.Results = append(t.status.Results, res)
	t.status.Progress.Samples = res.Samples
	t.mu.Unlock()
}

// acquire queues stage k for workers slots and waits for the scheduler.
func (t *taskRun) acquire(k int, st *tasks.Stage, workers int) ([]scheduler.Assignment, error) {
	pinned := st.Slaves
	if t.modelAt != "" && len(pinned) == 0 && t.m.slotsOf(t.modelAt) >= workers {
		// The model waits in that slave's memory: run there and the
		// hand-over is free.
		pinned = []string{t.modelAt}
	}
	grant, err := t.m.request(scheduler.Request{
		Task: t.spec.ID, Stage: k, Workers: workers, MaxSlaves: st.MaxSlaves, OneSlave: st.OneSlave(),
		Pinned: pinned, Priority: t.spec.Priority, Submitted: t.status.Submitted, Waiting: time.Now(),
	})
	if err != nil {
		return nil, fmt.Errorf("stage %d (%s): %w", k, st.Name, err)
	}
	t.publish(status.EventStatus, nil)
	var placement []scheduler.Assignment
	select {
	case placement = <-grant:
	case <-t.ctx.Done():
		t.m.withdraw(t.spec.ID, k)
		select {
		case a := <-grant:
			t.m.release(a)
		default:
		}
		return nil, t.cause()
	}
	t.mu.Lock()
	t.holding = map[string]int{}
	for _, a := range placement {
		t.holding[a.Slave] += a.Workers
		t.used[a.Slave] = true
	}
	if t.status.State == status.Queued {
		t.status.State, t.status.Started = status.Running, time.Now()
	}
	t.mu.Unlock()
	return placement, nil
}

func (t *taskRun) releaseSlots(placement []scheduler.Assignment) {
	t.mu.Lock()
	t.holding = nil
	t.mu.Unlock()
	t.m.release(placement)
}

// autoCandidates are the parallelisms an "auto" stage tries: powers of
// two up to what the live cluster (or one slave, for one-slave stages)
// offers, and that maximum itself.
func (t *taskRun) autoCandidates(st *tasks.Stage) []int {
	t.m.mu.Lock()
	most, total := 0, 0
	for _, s := range t.m.slaves {
		if s.alive {
			total += s.Slots
			most = max(most, s.Slots)
		}
	}
	t.m.mu.Unlock()
	limit := total
	if st.OneSlave() {
		limit = most
	}
	if st.Workers > 0 {
		limit = min(limit, st.Workers) // workers with "auto" caps the search
	}
	if limit < 1 {
		return []int{1}
	}
	var out []int
	for w := 1; w < limit; w *= 2 {
		out = append(out, w)
	}
	return append(out, limit)
}

// autoTune runs a short trial of the stage at each candidate parallelism,
// measures the samples per second the workers report, and returns the
// fastest with a note saying what was measured. Updates made during ps
// trials stay in the KV-store (training progress is not thrown away);
// one-slave trials discard their in-memory model. If a trial finishes the
// stage, its result is returned instead.
func (t *taskRun) autoTune(k int, st *tasks.Stage) (int, string, *status.StageResult, error) {
	trial := time.Duration(st.AutoTrialSeconds * float64(time.Second))
	if trial <= 0 {
		trial = 2 * time.Second
	}
	best, bestRate := 0, -1.0
	var parts []string
	for _, w := range t.autoCandidates(st) {
		placement, err := t.acquire(k, st, w)
		if err != nil {
			return 0, "", nil, err
		}
		res, stopped, err := t.runStage(k, st, w, placement, trial)
		t.releaseSlots(placement)
		if err != nil {
			return 0, "", nil, err
		}
		if !stopped {
			parts = append(parts, fmt.Sprintf("%d workers finished the stage during the trial", w))
			return w, "auto: " + strings.Join(parts, ", "), &res, nil
		}
		rate := float64(res.Samples) / max(res.Seconds, 1e-9)
		parts = append(parts, fmt.Sprintf("%d workers %.0f samples/s", w, rate))
		t.m.log.Info().Str("task", t.spec.ID).Int("stage", k).Int("workers", w).Float64("samples_per_sec", rate).Msg("auto parallelism trial")
		if rate > bestRate {
			best, bestRate = w, rate
		}
	}
	return best, fmt.Sprintf("auto: measured %s over %v trials; chose %d workers (highest measured throughput)", strings.Join(parts, ", "), trial, best), nil, nil
}

func (t *taskRun) placements() []kvstore.Placement {
	out := make([]kvstore.Placement, len(t.spec.Tables))
	for i, spec := range t.spec.Tables {
		out[i] = kvstore.Placement{Spec: spec, Hosts: t.hosts}
	}
	return out
}

// runStage runs stage k on placement to its end, or, with trial > 0, for
// at most that long: then its workers are stopped and stopped is true.
func (t *taskRun) runStage(k int, st *tasks.Stage, workers int, placement []scheduler.Assignment, trial time.Duration) (res status.StageResult, stopped bool, err error) {
	m := t.m
	stageErr := func(err error) (status.StageResult, bool, error) {
		return res, false, fmt.Errorf("stage %d (%s): %w", k, st.Name, err)
	}
	if t.hosts == nil {
		t.mu.Lock()
		t.hosts = m.aliveSlaves()
		for _, h := range t.hosts {
			t.used[h] = true
		}
		t.mu.Unlock()
		if len(t.hosts) == 0 {
			return stageErr(errors.New("no live slave to host the tables"))
		}
		if err := m.ctlAll(t.ctx, t.hosts, proto.SlaveCtl{Op: proto.OpCreateTables, Task: t.spec.ID, Tables: t.placements()}); err != nil {
			return stageErr(err)
		}
	}
	if err := m.ctlAll(t.ctx, t.hosts, proto.SlaveCtl{Op: proto.OpPrepareStage, Task: t.spec.ID, Stage: k,
		Consistency: st.Consistency, Workers: workers}); err != nil {
		return stageErr(err)
	}
	// Ranks go to slaves in placement order; the FileAssigner knows where
	// each rank runs.
	var ws []assign.Worker
	ranks := map[string][]int{}
	rank := 0
	for _, a := range placement {
		host := m.slaveHost(a.Slave)
		for i := 0; i < a.Workers; i++ {
			ranks[a.Slave] = append(ranks[a.Slave], rank)
			ws = append(ws, assign.Worker{Rank: rank, Host: host})
			rank++
		}
	}
	inputs := st.Inputs
	if len(inputs) == 0 {
		for name := range t.spec.Inputs {
			inputs = append(inputs, name)
		}
	}
	for _, in := range inputs {
		m.setAssigner(assignKey{t.spec.ID, k, in}, assign.New(t.blocks[in], ws))
		defer m.setAssigner(assignKey{t.spec.ID, k, in}, nil)
	}
	// Direct model transfer between consecutive one-slave stages.
	retain := t.spec.ModelTransfer == tasks.TransferDirect && st.OneSlave() && k+1 < len(t.spec.Stages) && t.spec.Stages[k+1].OneSlave()
	from := ""
	if st.OneSlave() {
		from = t.modelAt
	}
	t.openBarriers(k, workers)
	defer t.closeBarriers(fmt.Sprintf("stage %d (%s) ended before every worker reached the barrier", k, st.Name))
	started := time.Now()
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range placement {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.ctl(t.ctx, a.Slave, proto.SlaveCtl{Op: proto.OpStartWorkers, Task: t.spec.ID, Stage: k, Spec: t.spec,
				Workers: workers, Ranks: ranks[a.Slave], Hosts: t.hosts, Tables: t.placements(), Consistency: st.Consistency,
				Retain: retain, TransferFrom: from})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return stageErr(err)
	}
	m.log.Info().Str("task", t.spec.ID).Int("stage", k).Str("func", st.Func).Int("workers", workers).Msg("stage started")
	t.publish(status.EventStatus, nil)

	res = status.StageResult{Index: k, Name: st.Name, Func: st.Func, Workers: workers, Placement: map[string]int{}, Metrics: map[string]float64{}}
	var trialEnd <-chan time.Time
	if trial > 0 {
		timer := time.NewTimer(trial)
		defer timer.Stop()
		trialEnd = timer.C
	}
	for _, a := range placement {
		res.Placement[a.Slave] += a.Workers
	}
	epochs := map[int]*status.Epoch{}
	var samples int64
	var winLoss float64
	var winSamples int64
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	dirty := false
	for done := 0; done < workers; {
		select {
		case <-t.ctx.Done():
			return res, false, t.cause()
		case <-trialEnd:
			// Trial over: stop the workers, then count them out below.
			stopped = true
			res.Seconds = time.Since(started).Seconds()
			res.Samples = samples
			for _, a := range placement {
				if err := m.ctl(t.ctx, a.Slave, proto.SlaveCtl{Op: proto.OpStopStage, Task: t.spec.ID, Stage: k}); err != nil {
					return stageErr(err)
				}
			}
		case <-ticker.C:
			if dirty {
				el := time.Since(started).Seconds()
				t.mu.Lock()
				t.status.Progress.Samples = samples
				if winSamples > 0 {
					t.status.Progress.Loss = winLoss / float64(winSamples)
				}
				t.status.Progress.SamplesPerSec = float64(samples) / max(el, 1e-9)
				t.mu.Unlock()
				winLoss, winSamples, dirty = 0, 0, false
				t.publish(status.EventProgress, nil)
			}
		case ev := <-t.events:
			if ev.Stage != k {
				continue
			}
			switch ev.Kind {
			case proto.WorkerProgress:
				samples += ev.Samples
				winSamples += ev.Samples
				winLoss += ev.LossSum
				dirty = true
			case proto.WorkerEpoch:
				e := epochs[ev.Epoch]
				if e == nil {
					e = &status.Epoch{Stage: k, Epoch: ev.Epoch, Metrics: map[string]float64{}}
					epochs[ev.Epoch] = e
				}
				e.Workers++
				e.Seconds = max(e.Seconds, ev.Seconds)
				for key, v := range ev.Metrics {
					e.Metrics[key] += v
				}
				if e.Workers == workers {
					res.Epochs = append(res.Epochs, *e)
					delete(epochs, ev.Epoch)
					t.mu.Lock()
					t.status.Progress.Epoch = ev.Epoch
					t.mu.Unlock()
					t.publish(status.EventEpoch, e)
				}
			case proto.WorkerDone:
				done++
				res.WorkerSeconds += ev.Seconds
				res.WorkerStats = append(res.WorkerStats, status.WorkerStat{Rank: ev.Rank, Slave: ev.Slave, Seconds: ev.Seconds,
					ReadBytes: int64(ev.Metrics[tasks.MetricReadBytes]), LocalBytes: int64(ev.Metrics[tasks.MetricReadLocalBytes]),
					WaitSecs: ev.Metrics[tasks.MetricReadWaitSeconds], Blocks: int64(ev.Metrics[tasks.MetricReadBlocks]), Cached: int64(ev.Metrics[tasks.MetricReadCachedBlocks])})
				for _, l := range ev.BadLines {
					if len(res.BadLines) < 5 {
						res.BadLines = append(res.BadLines, l)
					}
				}
				for key, v := range ev.Metrics {
					res.Metrics[key] += v
				}
			case proto.WorkerError:
				if stopped {
					done++ // stopped on purpose at the end of a trial
					continue
				}
				return stageErr(fmt.Errorf("worker %d on slave %s: %s", ev.Rank, ev.Slave, ev.Error))
			}
		}
	}
	// Epochs not every worker reported (workers may run different counts).
	keys := make([]int, 0, len(epochs))
	for e := range epochs {
		keys = append(keys, e)
	}
	sort.Ints(keys)
	for _, e := range keys {
		res.Epochs = append(res.Epochs, *epochs[e])
	}
	sort.Slice(res.Epochs, func(i, j int) bool { return res.Epochs[i].Epoch < res.Epochs[j].Epoch })
	if !stopped {
		res.Seconds = time.Since(started).Seconds()
		res.Samples = samples
	}
	sort.Slice(res.WorkerStats, func(i, j int) bool { return res.WorkerStats[i].Rank < res.WorkerStats[j].Rank })
	if err := m.ctlAll(t.ctx, t.hosts, proto.SlaveCtl{Op: proto.OpEndStage, Task: t.spec.ID, Stage: k}); err != nil {
		return stageErr(err)
	}
	if stopped {
		return res, true, nil
	}
	t.modelAt = ""
	if retain {
		t.modelAt = placement[0].Slave
	}
	if from != "" {
		res.Note = fmt.Sprintf("model taken directly from slave %s (%.3fs)", from, res.Metrics[tasks.MetricModelLoadSeconds])
	}
	m.log.Info().Str("task", t.spec.ID).Int("stage", k).Float64("seconds", res.Seconds).Int64("samples", samples).Msg("stage done")
	return res, false, nil
}
