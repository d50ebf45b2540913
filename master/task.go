package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexps/flexps/checkpoint"
	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/master/lifecycle"
	"github.com/flexps/flexps/scheduler"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
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

	mu     sync.Mutex
	status status.Task
	hosts  []string        // shard hosts
	routes *kvstore.Routes // which shard hosts are alive, for the master's KV clients
	// replicas of each table as resolved on the hosts (the spec keeps the
	// user's setting, so a resumed task resolves it again)
	replicas []int
	modelAt  string          // slave retaining the last stage's model (direct transfer)
	used     map[string]bool // every slave the task touched
	reported map[string]bool // dead slaves a stage's failovers named
	holding  map[string]int  // slots held now
	lost     map[string]int  // the running stage's slots on slaves that died or left

	// The running stage's state machine (nil between stages) and where it
	// hands its one StageFinished to the task's goroutine.
	stage    *lifecycle.Stage
	stageEnd chan lifecycle.StageFinished
	inputs   []assignKey // the running stage's inputs

	// ckpt is the task's checkpoint state (nil: no [checkpoint]);
	// resume the checkpoint a resumed task starts from (nil once its
	// tables are loaded), startEpoch the epochs of its stage done.
	ckpt       *checkpointer
	resume     *checkpoint.Checkpoint
	startEpoch int

	// first is stage 0's slot request, queued at submission so the
	// scheduler sees tasks in submission order (nil for auto stages).
	first chan []scheduler.Assignment
}

func newTaskRun(m *Master, spec *tasks.MultiStageTask, blocks map[string][]datastore.Block) *taskRun {
	ctx, cancel := context.WithCancelCause(m.ctx)
	return &taskRun{
		m: m, spec: spec, blocks: blocks, ctx: ctx, cancel: cancel,
		ended: make(chan struct{}),
		used:  map[string]bool{}, reported: map[string]bool{},
		status: status.Task{ID: spec.ID, Name: spec.Name, State: status.Queued, Stages: len(spec.Stages),
			Priority: spec.Priority, Submitted: m.cfg.Now(), Output: spec.Output},
	}
}

// slaveDead handles the death of a slave the task used. The running
// stage hears it as a lifecycle event and either goes on without the
// slave (its tables are replicated; its workers' blocks go to the
// survivors) or fails. Between stages the task goes on if its tables are
// replicated and no model waits in the dead slave's memory. A task that
// cannot go on is cancelled, which ends whatever else it waits for.
func (t *taskRun) slaveDead(slave string, err error, left bool) {
	t.mu.Lock()
	mach := t.stage
	running := mach != nil && mach.Phase() != lifecycle.Ended
	t.mu.Unlock()
	if running {
		t.step(lifecycle.SlaveDead{Slave: slave, Err: err, Left: left})
		t.mu.Lock()
		failed := mach.Err() != nil
		t.mu.Unlock()
		if !failed {
			return
		}
	} else if why := t.betweenStages(slave); why == "" {
		t.m.log.Warn().Str("task", t.spec.ID).Str("slave", slave).Msg("a slave the task used died between stages; its tables are replicated, the task goes on")
		return
	} else {
		err = fmt.Errorf("%w; the task cannot go on without it: %s", err, why)
	}
	t.cancel(err)
}

// betweenStages says why the task cannot lose slave while no stage runs
// ("" when it can).
func (t *taskRun) betweenStages(slave string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.modelAt == slave {
		return fmt.Sprintf("the model of the last stage waits in slave %s's memory for a direct transfer", slave)
	}
	if !slices.Contains(t.hosts, slave) {
		return ""
	}
	for _, tb := range t.tablesLocked() {
		if tb.Replicas < 2 {
			return lifecycle.UnreplicatedWhy(tb.Name, tb.Replicas)
		}
	}
	return ""
}

// liveHosts are the task's shard hosts still alive: a dead one is failed
// over by its backups and gets no more control requests, also once it
// rejoined under its id as a fresh instance, which holds nothing of the
// task (a stage's prepare sent to it failed the task: "no tables for
// task").
func (t *taskRun) liveHosts() []string {
	return t.hostsWhere(func(h string, r *kvstore.Routes) bool { return t.m.isAlive(h) && (r == nil || r.Alive(h)) })
}

// stageHosts are the task's shard hosts a stage counts as such: all but
// those that died and rejoined as fresh instances (a dead one is counted
// out of the stage as it starts).
func (t *taskRun) stageHosts() []string {
	return t.hostsWhere(func(h string, r *kvstore.Routes) bool { return !t.m.isAlive(h) || r == nil || r.Alive(h) })
}

// deadHosts are the task's shard hosts that died since its tables were
// placed (rejoined as fresh instances or not).
func (t *taskRun) deadHosts() []string {
	return t.hostsWhere(func(h string, r *kvstore.Routes) bool { return r != nil && !r.Alive(h) })
}

func (t *taskRun) hostsWhere(keep func(string, *kvstore.Routes) bool) []string {
	t.mu.Lock()
	hosts, r := slices.Clone(t.hosts), t.routes
	t.mu.Unlock()
	out := hosts[:0]
	for _, h := range hosts {
		if keep(h, r) {
			out = append(out, h)
		}
	}
	return out
}

func (t *taskRun) cancelRun(err error) { t.cancel(err) }

// waitsFor records why the task's queued stage cannot start even with
// every slot free ("" once it can), logs it and tells its followers.
func (t *taskRun) waitsFor(why string) {
	t.m.mu.Lock()
	still := false // a grant meanwhile cleared it for good
	for _, w := range t.m.queue {
		still = still || (w.req.Task == t.spec.ID && w.unfit == (why != ""))
	}
	t.m.mu.Unlock()
	if !still {
		return
	}
	t.mu.Lock()
	t.status.Waiting = why
	t.mu.Unlock()
	if why == "" {
		t.m.log.Info().Str("task", t.spec.ID).Msg("the queued stage fits the cluster again")
		return
	}
	t.m.log.Warn().Str("task", t.spec.ID).Msg(why)
	t.publishMsg(status.EventWaiting, nil, why)
}

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

// finishedBefore reports whether the task ended before t.
func (t *taskRun) finishedBefore(at time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.status.Finished.IsZero() && t.status.Finished.Before(at)
}

// started reports whether the task began running its stages.
func (t *taskRun) started() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.status.Started.IsZero()
}

// stallErr is why the task fails after the master stalled for gap.
func (t *taskRun) stallErr(gap, timeout time.Duration) error {
	hint := ""
	if t.ckpt != nil {
		hint = "; flexps submit --resume DIR continues it from its last checkpoint"
	}
	return fmt.Errorf("the master did not run for %v, longer than failure_timeout (%v): its slaves stopped its tasks (the master's process was stopped, swapped out or starved; raise failure_timeout if its host stalls that long)%s",
		gap.Round(time.Millisecond), timeout, hint)
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
	s.Lost = maps.Clone(t.lost)
	s.Results = append([]status.StageResult(nil), t.status.Results...)
	return s
}

// slotsHeld is the number of worker slots the task holds now.
func (t *taskRun) slotsHeld() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, k := range t.holding {
		n += k
	}
	return n
}

// event hands a worker's event to the running stage.
func (t *taskRun) event(ev proto.WorkerEvent) {
	if ev.Kind == proto.ShardLost {
		// Whether or not a worker touches the shard: no copy is left.
		t.m.log.Error().Str("task", t.spec.ID).Str("slave", ev.Slave).Str("error", ev.Error).Msg("a shard of the task lost every copy; the task fails")
		t.cancel(fmt.Errorf("%s (reported by slave %s); with a [checkpoint] dir, flexps submit --resume DIR continues from the last checkpoint", ev.Error, ev.Slave))
		return
	}
	if ev.Kind == proto.WorkerDone {
		t.mu.Lock()
		inputs := t.inputs
		t.mu.Unlock()
		t.m.rankEnded(inputs, ev.Rank)
	}
	if e := lifecycle.FromWorker(ev, t.m.cfg.Now()); e != nil {
		t.step(e)
	}
}

func (t *taskRun) publish(kind string, ep *status.Epoch) { t.publishMsg(kind, ep, "") }

func (t *taskRun) publishMsg(kind string, ep *status.Epoch, msg string) {
	t.m.publishTask(t.spec.ID, status.Event{Kind: kind, Status: t.snapshot(), Epoch: ep, Message: msg})
}

func (t *taskRun) run() {
	defer t.m.wg.Done()
	if err := t.persist(); err != nil {
		t.m.log.Error().Err(err).Str("task", t.spec.ID).Msg("task record not written: a restarted master will not resume this task")
	}
	err := t.execute()
	if t.ckpt != nil {
		// No checkpoint is written after this: the dir is free for the
		// next task (or a resume) before this one is seen ended.
		t.ckpt.lock.Unlock()
	}
	if cause := context.Cause(t.ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(err, cause) && errors.Is(err, context.Canceled) {
		// A step that failed only because the task was stopped ("slave s1
		// did not answer create_tables: context canceled") reports why:
		// the cause (a slave's death, then what it interrupted; the
		// user's cancel alone). Before, a resume placed on a slave that
		// died before the master declared it failed with "loading
		// checkpoint ...: table "users": context canceled", naming no
		// slave, and a task cancelled early ended "failed".
		if errors.Is(cause, errCancelled) {
			err = cause
		} else {
			err = fmt.Errorf("%w (it interrupted: %v)", cause, err)
		}
	}
	if t.m.ctx.Err() == nil {
		t.unpersist()
	} // else the master is going away: its successor resumes the task
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
	t.status.Finished = t.m.cfg.Now()
	t.holding, t.lost = nil, nil
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
	// The task no longer counts as running: let waiting tasks start, and
	// forget the oldest ended tasks beyond keep_tasks.
	t.m.mu.Lock()
	t.m.scheduleLocked()
	t.m.pruneLocked()
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
	first := 0
	if t.resume != nil {
		p := t.resume.Progress
		first, t.startEpoch = p.Stage, p.Epoch
		t.mu.Lock()
		t.status.Results = append([]status.StageResult(nil), p.Results...)
		t.status.Progress.Samples = p.Samples
		t.mu.Unlock()
		if first == len(t.spec.Stages) {
			// Checkpointed after the last stage: only the output is left,
			// read from the restored tables.
			if err := t.createTables(); err != nil {
				return err
			}
		}
	}
	for k := first; k < len(t.spec.Stages); k++ {
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
				t.startEpoch = 0
				if err := t.afterStage(k); err != nil {
					return err
				}
				continue
			}
			workers, note = best, why
		}
		if w, why := t.shrink(k, st, workers); w < workers {
			msg := fmt.Sprintf("stage %d (%s): runs %d of its %d workers: %s", k, st.Name, w, workers, why)
			t.m.log.Warn().Str("task", t.spec.ID).Msg(msg)
			t.publishMsg(status.EventFailover, nil, msg)
			workers, note = w, msg
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
		t.startEpoch = 0
		if err := t.afterStage(k); err != nil {
			return err
		}
	}
	return t.writeOutput()
}

// shrink is how many workers stage k may run with: workers, or fewer
// when the live slaves do not have the slots and either a slave the task
// used died (a task that survived a death goes on with the survivors, as
// the stage it died in did) or the task was resumed from a checkpoint (on
// what is left of the cluster after a failure: the checkpoint fixes the
// task, so its user cannot lower workers). Stage functions take any worker
// count. why says which, for the stage's note.
func (t *taskRun) shrink(k int, st *tasks.Stage, workers int) (int, string) {
	t.mu.Lock()
	used := slices.Collect(maps.Keys(t.used))
	resumed := t.status.Resumed
	t.mu.Unlock()
	var dead []string
	for _, s := range used {
		if !t.m.isAlive(s) {
			dead = append(dead, s)
		}
	}
	if len(dead) == 0 && resumed == "" || st.Auto {
		return workers, ""
	}
	slices.Sort(dead)
	r := t.slotRequest(k, st, workers, st.Slaves)
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	cluster := t.m.schedSlavesLocked()
	for ; r.Workers > 1 && !scheduler.Fits(r, cluster); r.Workers-- {
	}
	if !scheduler.Fits(r, cluster) {
		return workers, "" // no count fits (its pinned slaves are gone): the request says why
	}
	if len(dead) > 0 {
		return r.Workers, fmt.Sprintf("slave %s died and the cluster has slots for %d", strings.Join(dead, ", slave "), r.Workers)
	}
	return r.Workers, fmt.Sprintf("resumed from %s on a cluster with slots for %d", resumed, r.Workers)
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
	grant := t.first
	t.first = nil
	why := ""
	if k != 0 || grant == nil {
		var err error
		grant, why, err = t.m.requestOrWait(t.slotRequest(k, st, workers, pinned))
		if err != nil {
			return nil, fmt.Errorf("stage %d (%s): %w", k, st.Name, err)
		}
	}
	t.publish(status.EventStatus, nil)
	if why != "" {
		t.waitsFor(why)
	}
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
	t.status.Waiting = "" // granted: whatever it waited for is back
	t.holding, t.lost = map[string]int{}, nil
	for _, a := range placement {
		t.holding[a.Slave] += a.Workers
		t.used[a.Slave] = true
	}
	if t.status.State == status.Queued {
		t.status.State, t.status.Started = status.Running, t.m.cfg.Now()
	}
	t.mu.Unlock()
	return placement, nil
}

// slotRequest is stage k's request for workers slots.
func (t *taskRun) slotRequest(k int, st *tasks.Stage, workers int, pinned []string) scheduler.Request {
	return scheduler.Request{
		Task: t.spec.ID, Stage: k, Workers: workers, MaxSlaves: st.MaxSlaves, OneSlave: st.OneSlave(),
		Pinned: pinned, Priority: t.spec.Priority, Submitted: t.status.Submitted, Waiting: t.m.cfg.Now(),
	}
}

// slotsLost moves the slots the running stage holds on slave, which died
// or left, from the slots it holds to those it lost: status listed a dead
// slave among the slots held until the stage ended.
func (t *taskRun) slotsLost(slave string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.holding[slave]
	if !ok {
		return
	}
	delete(t.holding, slave)
	if t.lost == nil {
		t.lost = map[string]int{}
	}
	t.lost[slave] += n
}

// releaseSlots gives back a stage's slots, but not those on slaves that
// died or left since it started: they went with the slave, and a
// restarted slave joins as a fresh incarnation with all its slots free
// (they were given to it again, and the next task overfilled it). Under
// the master's lock, which deaths are applied under.
func (t *taskRun) releaseSlots(placement []scheduler.Assignment) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	t.mu.Lock()
	lost := t.lost
	t.holding, t.lost = nil, nil
	t.mu.Unlock()
	held := make([]scheduler.Assignment, 0, len(placement))
	for _, a := range placement {
		if _, gone := lost[a.Slave]; !gone {
			held = append(held, a)
		}
	}
	t.m.releaseLocked(held)
}

// autoLimit is the largest parallelism an "auto" stage may try: what the
// live cluster (or one slave, for one-slave stages) offers, capped by the
// stage's workers.
func (t *taskRun) autoLimit(st *tasks.Stage) int {
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
	return limit
}

// nextCandidate is the parallelism an "auto" stage tries after tried
// (0: none yet): the next power of two below what the live cluster offers
// now, then that maximum itself; 0 when there is none. It is asked
// before every trial, so a slave that died or left during the trials
// takes its slots out of the search.
func (t *taskRun) nextCandidate(st *tasks.Stage, tried int) int {
	limit := t.autoLimit(st)
	if limit < 1 {
		limit = 1
	}
	for w := 1; w < limit; w *= 2 {
		if w > tried {
			return w
		}
	}
	if limit > tried {
		return limit
	}
	return 0
}

// autoTune runs a short trial of the stage at each candidate parallelism,
// measures the samples per second the workers report, and returns the
// fastest the live cluster still has the slots for, with a note saying
// what was measured. Updates made during ps trials stay in the KV-store
// (training progress is not thrown away); one-slave trials discard their
// in-memory model. If a trial finishes the stage, its result is returned
// instead.
func (t *taskRun) autoTune(k int, st *tasks.Stage) (int, string, *status.StageResult, error) {
	trial := time.Duration(st.AutoTrialSeconds * float64(time.Second))
	if trial <= 0 {
		trial = 2 * time.Second
	}
	var parts []string
	var tried []int
	rates := map[int]float64{}
	for w := t.nextCandidate(st, 0); w > 0; w = t.nextCandidate(st, w) {
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
			parts = append(parts, trialNote(w, 0, true))
			return w, "auto: " + strings.Join(parts, ", "), &res, nil
		}
		rate := float64(res.Samples) / max(res.Seconds, 1e-9)
		parts = append(parts, trialNote(w, rate, false))
		t.m.log.Info().Str("task", t.spec.ID).Int("stage", k).Int("workers", w).Float64("samples_per_sec", rate).Msg("auto parallelism trial")
		tried, rates[w] = append(tried, w), rate
	}
	// A parallelism measured before a slave died may no longer fit.
	limit := max(t.autoLimit(st), 1)
	best, bestRate := 0, -1.0
	for _, w := range tried {
		if w <= limit && rates[w] > bestRate {
			best, bestRate = w, rates[w]
		}
	}
	why := "highest measured throughput"
	for _, w := range tried {
		if w > limit && rates[w] > bestRate {
			why = fmt.Sprintf("highest measured throughput the live slaves have the slots for: %d", limit)
		}
	}
	return best, fmt.Sprintf("auto: measured %s over %v trials; chose %s (%s)", strings.Join(parts, ", "), trial, workerCount(best), why), nil, nil
}

// trialNote is an auto trial's part of the stage's note: its
// parallelism and throughput, or that it finished the stage.
func trialNote(w int, rate float64, finished bool) string {
	if finished {
		return workerCount(w) + " finished the stage during the trial"
	}
	return fmt.Sprintf("%s %.0f samples/s", workerCount(w), rate)
}

// workerCount is "1 worker" or "N workers".
func workerCount(n int) string {
	if n == 1 {
		return "1 worker"
	}
	return fmt.Sprintf("%d workers", n)
}

func (t *taskRun) placements() []kvstore.Placement {
	specs := t.tablesLocked()
	out := make([]kvstore.Placement, len(specs))
	for i, spec := range specs {
		out[i] = kvstore.Placement{Spec: spec, Hosts: t.hosts}
	}
	return out
}

// tablesLocked are the task's tables with their replicas as resolved on
// the hosts (the spec keeps the user's setting); t.mu held or the tables
// placed already.
func (t *taskRun) tablesLocked() []kvstore.TableSpec {
	out := slices.Clone(t.spec.Tables)
	for i := range out {
		if i < len(t.replicas) {
			out[i].Replicas = t.replicas[i]
		}
	}
	return out
}
