package master

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/master/assign"
	"github.com/flexps/flexps/master/lifecycle"
	"github.com/flexps/flexps/scheduler"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
)

// tickEvery is how often the stage's clock ticks: progress events and
// trial deadlines are checked at this grain.
const tickEvery = 100 * time.Millisecond

// runStage runs stage k on placement to its end, or, with trial > 0, for
// at most that long: then its workers are stopped and stopped is true.
// The stage itself is a lifecycle.Stage; this goroutine prepares the
// slaves, feeds the machine clock ticks and cancellation, and carries out
// its actions (worker events and barrier arrivals reach it from the NATS
// handlers through step).
func (t *taskRun) runStage(k int, st *tasks.Stage, workers int, placement []scheduler.Assignment, trial time.Duration) (res status.StageResult, stopped bool, err error) {
	m := t.m
	stageErr := func(err error) (status.StageResult, bool, error) {
		return res, false, fmt.Errorf("stage %d (%s): %w", k, st.Name, err)
	}
	if err := t.createTables(); err != nil {
		return stageErr(err)
	}
	prepare := proto.SlaveCtl{Op: proto.OpPrepareStage, Task: t.spec.ID, Stage: k, Consistency: st.Consistency, Workers: workers}
	if err := eachSlave(t.liveHosts(), func(s string) error { return m.ctlOrDead(t.ctx, s, prepare) }); err != nil {
		return stageErr(err)
	}
	// What the stage survives follows from its tables' replicas, resolved
	// by createTables, and its worker kind.
	t.mu.Lock()
	tables := t.tablesLocked()
	t.mu.Unlock()
	surv := lifecycle.Survivability(st.Name, st.WorkerKind, tables)
	mach := lifecycle.New(lifecycle.Config{Task: t.spec.ID, Stage: k, Name: st.Name, Func: st.Func, Workers: workers,
		Placement: placement, Hosts: t.stageHosts(), Epochs: st.Params.Int("epochs", 0), Trial: trial, Survival: surv})
	epochBarrier := t.epochBarriers(st, trial)
	// The FileAssigner knows where each rank runs.
	var ws []assign.Worker
	for _, a := range placement {
		host := m.slaveHost(a.Slave)
		for _, r := range mach.Ranks(a.Slave) {
			ws = append(ws, assign.Worker{Rank: r, Host: host})
		}
	}
	inputs := st.Inputs
	if len(inputs) == 0 {
		for name := range t.spec.Inputs {
			inputs = append(inputs, name)
		}
	}
	keys := make([]assignKey, 0, len(inputs))
	for _, in := range inputs {
		key := assignKey{t.spec.ID, k, in}
		keys = append(keys, key)
		// A worker's "epoch empty" is held until the epoch is finished
		// (tasks.Stage.SettlesEpochs; in a stage that survives its
		// workers' deaths, always: no block of it can come back then).
		m.setAssigner(key, assign.New(t.blocks[in], ws), st.SettlesEpochs(), surv.Workers)
		defer m.setAssigner(key, nil, false, false)
	}
	// Direct model transfer between consecutive one-slave stages.
	retain := t.spec.ModelTransfer == tasks.TransferDirect && st.OneSlave() && k+1 < len(t.spec.Stages) && t.spec.Stages[k+1].OneSlave()
	from := ""
	if st.OneSlave() {
		from = t.modelAt
	}
	t.mu.Lock()
	t.stage, t.stageEnd, t.inputs = mach, make(chan lifecycle.StageFinished, 1), keys
	t.status.Progress = mach.Progress()
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.stage, t.inputs = nil, nil
		t.mu.Unlock()
	}()
	start := func(a lifecycle.StartWorkers) error {
		return m.ctlOrDead(t.ctx, a.Slave, proto.SlaveCtl{Op: proto.OpStartWorkers, Task: t.spec.ID, Stage: k, Spec: t.spec,
			Workers: workers, Ranks: a.Ranks, Hosts: t.hosts, DeadHosts: t.deadHosts(), Tables: t.placements(), Consistency: st.Consistency,
			Retain: retain, TransferFrom: from, StartEpoch: t.startEpoch, EpochBarrier: epochBarrier, Survivable: surv.Shards})
	}
	stop := func(a lifecycle.StopWorkers) error {
		return m.ctl(t.ctx, a.Slave, proto.SlaveCtl{Op: proto.OpStopStage, Task: t.spec.ID, Stage: k})
	}
	// A slave that died since the placement was granted or the tables
	// were placed is one the stage must do without, or fail for.
	for _, s := range slices.Concat(t.stageHosts(), mach.Slaves()) {
		if !m.isAlive(s) {
			t.mu.Lock()
			known := t.reported[s]
			t.mu.Unlock()
			t.step(lifecycle.SlaveDead{Slave: s, Err: fmt.Errorf("slave %s is no longer a member of the cluster", s), Known: known})
		}
	}
	t.stepWith(lifecycle.Begin{Now: m.cfg.Now()}, start, stop)
	t.mu.Lock()
	phase := mach.Phase()
	t.mu.Unlock()
	if phase != lifecycle.Ended { // a stage that ended already says so below
		m.log.Info().Str("task", t.spec.ID).Int("stage", k).Str("func", st.Func).Int("workers", workers).Msg("stage started")
	}

	fin := t.awaitStage(keys, start, stop)
	// The deaths this stage heard of are reported: later stages count
	// those slaves out quietly.
	for _, f := range fin.Result.Failovers {
		t.mu.Lock()
		t.reported[f.Slave] = true
		t.mu.Unlock()
	}
	if fin.Err != nil {
		return fin.Result, false, fin.Err
	}
	res, stopped = fin.Result, fin.Stopped
	if err := m.ctlCleanup(t.ctx, t.liveHosts(), proto.SlaveCtl{Op: proto.OpEndStage, Task: t.spec.ID, Stage: k}); err != nil {
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
	m.log.Info().Str("task", t.spec.ID).Int("stage", k).Float64("seconds", res.Seconds).Int64("samples", res.Samples).Msg("stage done")
	return res, false, nil
}

// awaitStage ticks the running stage's clock until it finishes; the end of
// the task's context becomes a Cancel event.
func (t *taskRun) awaitStage(inputs []assignKey, start func(lifecycle.StartWorkers) error, stop func(lifecycle.StopWorkers) error) lifecycle.StageFinished {
	ticker := time.NewTicker(tickEvery)
	defer ticker.Stop()
	for {
		select {
		case fin := <-t.stageEnd:
			return fin
		case <-t.ctx.Done():
			t.stepWith(lifecycle.Cancel{Err: t.cause()}, start, stop)
			// The machine has ended now, by this event or an earlier one,
			// and handed over its one StageFinished.
			return <-t.stageEnd
		case <-ticker.C:
			t.mu.Lock()
			// Passes over the inputs count from 0 in every run, epochs
			// from where a resumed stage starts.
			epoch := max(0, t.stage.Progress().Epoch-t.startEpoch)
			t.mu.Unlock()
			now := t.m.cfg.Now()
			t.m.expireHeld(inputs, now)
			t.stepWith(lifecycle.Tick{Now: now, Handed: t.m.handed(inputs, epoch)}, start, stop)
		}
	}
}

// step feeds ev to the running stage from a NATS handler: the actions such
// events lead to never include control requests to slaves.
func (t *taskRun) step(ev lifecycle.Event) {
	t.stepWith(ev, nil, nil)
}

// stepWith feeds ev to the running stage under t.mu and carries out the
// actions outside it; start and stop send control requests (nil where
// they cannot arise).
func (t *taskRun) stepWith(ev lifecycle.Event, start func(lifecycle.StartWorkers) error, stop func(lifecycle.StopWorkers) error) {
	t.mu.Lock()
	mach, end, inputs := t.stage, t.stageEnd, t.inputs
	if mach == nil {
		t.mu.Unlock()
		if b, ok := ev.(lifecycle.BarrierArrived); ok {
			t.m.reply(waiterMsg(b.Waiter), proto.CtlReply{Error: fmt.Sprintf("task %s: barrier of stage %d, which is not running", t.spec.ID, b.Stage), Stopped: true})
		}
		return
	}
	acts := mach.Step(ev)
	t.status.Progress = mach.Progress()
	t.mu.Unlock()

	var starts []lifecycle.StartWorkers
	var after []lifecycle.Event
	for _, a := range acts {
		switch a := a.(type) {
		case lifecycle.StartWorkers:
			starts = append(starts, a)
		case lifecycle.StopWorkers:
			t.stepWith(lifecycle.Acked{Slave: a.Slave, Op: proto.OpStopStage, Err: t.ctlErr(stop(a)), Now: t.m.cfg.Now()}, start, stop)
		case lifecycle.Publish:
			if a.Message != "" {
				t.m.log.Warn().Str("task", t.spec.ID).Msg(a.Message)
			}
			t.publishMsg(a.Kind, a.Epoch, a.Message)
		case lifecycle.ReleaseBarrier:
			if a.Err == "" && !a.Repeat && len(a.Waiters) > 0 {
				// Every live worker was there: none waits any more.
				t.m.barrierReleased(inputs)
			}
			if e, ok := firstEpochWaiter(a.Waiters); ok && a.Err == "" && !a.Repeat {
				st := &t.spec.Stages[e.stage]
				t.m.wg.Add(1)
				go func() {
					defer t.m.wg.Done()
					t.epochEnd(e.stage, st, e.epoch, a.Waiters, a.Live)
				}()
				continue
			}
			for _, w := range a.Waiters {
				t.m.reply(waiterMsg(w), proto.CtlReply{OK: a.Err == "", Error: a.Err, Live: a.Live, Stopped: a.Stopped})
			}
		case lifecycle.ReleaseBlocks:
			n := t.m.removeRanks(inputs, a.Ranks)
			after = append(after, lifecycle.BlocksReleased{Slave: a.Slave, Blocks: n})
		case lifecycle.FinishRanks:
			t.finishRanks(a)
		case lifecycle.StageFinished:
			end <- a
		}
	}
	for _, ev := range after {
		t.stepWith(ev, start, stop)
	}
	if len(starts) == 0 {
		return
	}
	// Every slave starts its workers at once; the acknowledgements go back
	// to the machine one by one.
	errs := make([]error, len(starts))
	var wg sync.WaitGroup
	for i, a := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = t.ctlErr(start(a))
		}()
	}
	wg.Wait()
	for i, a := range starts {
		t.stepWith(lifecycle.Acked{Slave: a.Slave, Op: proto.OpStartWorkers, Err: errs[i], Now: t.m.cfg.Now()}, start, stop)
	}
}

// finishRanks tells the live slaves of the stage to count a dead slave's
// workers out of the stage's consistency gates. It does not wait: the
// death reaches the stage on the failure detector's goroutine. A live
// slave that cannot be told would hold the survivors back for good, so
// that fails the stage.
func (t *taskRun) finishRanks(a lifecycle.FinishRanks) {
	t.m.wg.Add(1)
	go func() {
		defer t.m.wg.Done()
		var wg sync.WaitGroup
		for _, s := range a.Slaves {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// ctlOrDead: a survivor killed too, not yet declared dead,
				// has its own death decide (a stage whose tables keep a
				// copy survives two deaths in a row).
				err := t.m.ctlOrDead(t.ctx, s, proto.SlaveCtl{Op: proto.OpFinishRanks, Task: t.spec.ID, Stage: a.Stage, Ranks: a.Ranks})
				if err == nil || t.ctx.Err() != nil || !t.m.isAlive(s) {
					return
				}
				t.step(lifecycle.Cancel{Err: fmt.Errorf("stage %d: slave %s could not count out the workers %v of a dead slave: %w", a.Stage, s, a.Ranks, err)})
			}()
		}
		wg.Wait()
	}()
}

// ctlErr turns the failure of a control request the task's own end caused
// into a Cancel of the stage, so the stage ends with the real cause.
func (t *taskRun) ctlErr(err error) error {
	if err != nil && t.ctx.Err() != nil {
		t.step(lifecycle.Cancel{Err: t.cause()})
	}
	return err
}

// barrier hands a worker's barrier arrival to the running stage.
func (t *taskRun) barrier(msg *nats.Msg, req proto.BarrierRequest) {
	var w any = msg
	if req.Epoch > 0 && t.ckpt != nil && req.Stage >= 0 && req.Stage < len(t.spec.Stages) {
		w = epochWaiter{msg: msg, stage: req.Stage, epoch: req.Epoch}
	}
	t.mu.Lock()
	inputs := t.inputs
	t.mu.Unlock()
	if len(inputs) > 0 && inputs[0].stage == req.Stage {
		t.m.atBarrier(inputs, req.Rank)
	}
	t.step(lifecycle.BarrierArrived{Stage: req.Stage, Rank: req.Rank, Seq: req.Seq, Waiter: w})
}

// hostDied marks slave dead in the routes of the task's KV clients: the
// master's model reads go to a replicated shard's new head.
func (t *taskRun) hostDied(slave string) {
	t.mu.Lock()
	r := t.routes
	t.mu.Unlock()
	if r != nil {
		r.MarkDead(slave)
	}
}

// createTables creates the task's tables on the live slaves the first
// time a stage needs them, and loads a resumed task's checkpoint into
// them.
func (t *taskRun) createTables() error {
	if t.hosts != nil {
		return nil
	}
	m := t.m
	hosts := m.aliveSlaves()
	if len(hosts) == 0 {
		return errors.New("no live slave to host the tables")
	}
	replicas := make([]int, len(t.spec.Tables))
	for i, spec := range t.spec.Tables {
		r, err := spec.ResolveReplicas(len(hosts), m.cfg.DefaultReplicas)
		if err != nil {
			return err
		}
		replicas[i] = r
	}
	t.mu.Lock()
	t.replicas = replicas
	t.hosts = hosts
	t.routes = kvstore.NewRoutes(hosts)
	for _, h := range t.hosts {
		t.used[h] = true
	}
	t.mu.Unlock()
	create := proto.SlaveCtl{Op: proto.OpCreateTables, Task: t.spec.ID, Tables: t.placements()}
	if err := eachSlave(t.hosts, func(s string) error { return m.ctlOrDead(t.ctx, s, create) }); err != nil {
		return err
	}
	if ck := t.resume; ck != nil {
		start := time.Now()
		if err := t.restoreTables(ck); err != nil {
			return fmt.Errorf("loading checkpoint %s: %w", t.status.Resumed, err)
		}
		t.resume = nil
		m.log.Info().Str("task", t.spec.ID).Str("checkpoint", t.status.Resumed).Dur("took", time.Since(start)).Msg("tables loaded from the checkpoint")
	}
	return nil
}

// handed is the share of the input blocks of pass epoch (the pass after
// the last finished epoch, as workers count passes from 0) handed out so
// far, averaged over the stage's inputs; 0 without inputs.
func (m *Master) handed(inputs []assignKey, epoch int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	sum, n := 0.0, 0
	for _, k := range inputs {
		as := m.assigners[k]
		if as == nil {
			continue
		}
		st := as.a.Stats(epoch)
		total := st.Remaining
		for _, r := range st.PerRank {
			total += r.Blocks
		}
		if total > 0 {
			sum += 1 - float64(st.Remaining)/float64(total)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
