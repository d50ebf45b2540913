package slave

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// worker runs one stage function; it is the tasks.Runtime the function
// sees.
type worker struct {
	s          *Slave
	req        proto.SlaveCtl
	stage      tasks.Stage
	fn         tasks.StageFunc
	rank       int
	gen        int // generation of the stage run (Control)
	localRank  int
	localCount int
	ctx        context.Context
	local      *localModel // set for local, hogwild and single stages
	localClock int64
	returned   atomic.Bool // its stage function returned: its local tables refuse calls
	// misuse: the stage function called the Runtime in a way it must not
	// (an epoch below 1, or below the last one); the worker fails with it
	// at its next Clock or Barrier, or when the function returns.
	misuse    error
	lastEpoch int
	barriers  int    // barriers passed
	live      []int  // the stage's live ranks as of the last barrier (nil: all)
	psClock   int64  // the KV client's clock (ps stages), for idle ticks
	inc       uint64 // the slave's membership incarnation when the worker started (KV fencing)

	client     *kvstore.Client
	caches     []*kvstore.CachedTable
	tables     map[string]tasks.Table
	progress   tasks.Progress
	lastReport time.Time
	epochStart time.Time
	reads      []datastore.PassStats
	own0       kvstore.OwnershipStats // this slave's relocation counters when the worker started (first local worker)
}

func (w *worker) run() {
	start := time.Now()
	log := w.s.log.With().Str("task", w.req.Task).Int("stage", w.req.Stage).Int("worker", w.rank).Logger()
	err := w.setup()
	if err == nil {
		info := &tasks.Info{
			Ctx: w.ctx, Task: w.req.Task, TaskName: w.req.Spec.Name, Stage: w.req.Stage, StageName: w.stage.Name,
			Rank: w.rank, Workers: w.req.Workers, LocalRank: w.localRank, LocalCount: w.localCount,
			Slave: w.s.cfg.ID, Params: w.stage.Params, Log: log, Runtime: w,
			Consistency: w.req.Consistency, WorkerKind: w.stage.WorkerKind, StartEpoch: w.req.StartEpoch,
		}
		w.epochStart, w.lastReport = time.Now(), time.Now()
		err = call(w.fn, info)
		w.returned.Store(true)
		if err == nil {
			err = w.misuse
		}
		if w.local != nil {
			if ferr := w.local.finish(w.ctx, w.rank, err != nil, w.barriers); err == nil {
				err = ferr
			}
		}
		if err == nil {
			w.flushProgress()
			err = w.client.Finish()
		}
	} else if w.local != nil {
		w.local.finish(w.ctx, w.rank, true, w.barriers)
	}
	if w.client != nil {
		w.client.Close()
	}
	ev := proto.WorkerEvent{Task: w.req.Task, Stage: w.req.Stage, Rank: w.rank, Seconds: time.Since(start).Seconds()}
	outcome := outcomeDone
	if err != nil {
		cause := context.Cause(w.ctx)
		if cause != nil {
			// The task was stopped from outside; say why, not "context canceled".
			err = fmt.Errorf("%w (task stopped: %v)", err, cause)
		}
		if errors.Is(err, kvstore.ErrTimeout) && w.s.reconnects != nil && (!w.s.nc.IsConnected() || w.s.reconnects.Within(2*w.s.cfg.KVTimeout)) {
			// The shards answer once the workers they wait for move on,
			// and those may have been waiting for the bus.
			err = fmt.Errorf("%w (this slave lost the bus to NATS meanwhile: the workers this read waited for may have been waiting for it; an outage longer than [slave] kv_timeout fails such reads)", err)
		}
		if cause != nil && errors.Is(err, context.Canceled) || errors.Is(err, errStageStopped) {
			// Stopped from outside (an auto trial's end, a cancel, a
			// Ctrl-C, another worker's failure): not an error of this
			// worker's; the master reports the task's fate.
			log.Info().Err(err).Msg("worker stopped")
			outcome = outcomeStopped
		} else {
			log.Error().Err(err).Msg("worker failed")
			outcome = outcomeFailed
		}
		ev.Kind, ev.Error = proto.WorkerError, err.Error()
		var lost *kvstore.SlaveLostError
		if errors.As(err, &lost) {
			ev.Lost = lost.Slave
		}
	} else {
		ev.Kind = proto.WorkerDone
		ev.Metrics = w.readMetrics()
		if w.local != nil && w.rank == 0 {
			ev.Metrics[tasks.MetricModelLoadSeconds] = w.local.loadSeconds
			ev.Metrics[tasks.MetricModelWritebackSeconds] = w.local.writebackSeconds
		}
		for _, p := range w.reads {
			for _, l := range p.FirstBad {
				if len(ev.BadLines) < 5 {
					ev.BadLines = append(ev.BadLines, l)
				}
			}
		}
		log.Debug().Dur("took", time.Since(start)).Msg("worker done")
	}
	if ev.Metrics != nil {
		w.s.metrics.workerEnded(ev.Metrics, outcome)
	} else {
		w.s.metrics.workerEnded(w.readMetrics(), outcome)
	}
	w.s.report(w.gen, ev)
}

// call runs a stage function, turning a panic into an error: user code
// must not take the slave down.
func call(fn tasks.StageFunc, info *tasks.Info) (err error) {
	defer func() {
		if r := recover(); r != nil {
			info.Log.Error().Str("stack", string(debug.Stack())).Msgf("stage function panicked: %v", r)
			err = fmt.Errorf("stage function panicked: %v", r)
		}
	}()
	return fn(info)
}

func (w *worker) setup() error {
	c, err := kvstore.NewClient(kvstore.ClientConfig{
		Transport: w.s.tr, Task: w.req.Task, Stage: int32(w.req.Stage), Worker: int32(w.rank),
		Self: w.s.cfg.ID, Server: w.s.kv, Hosts: w.req.Hosts, Consistency: w.req.Consistency, ClockedStage: clockedStage(w.req.Spec, w.req.Stage),
		Timeout: w.s.cfg.KVTimeout, Window: w.s.cfg.KVWindow, Ctx: w.ctx, Observer: w.s.metrics, Incarnation: w.inc,
		Routes: w.s.routes(w.req),
	})
	if err != nil {
		return err
	}
	w.client = c
	w.tables = map[string]tasks.Table{}
	if w.localRank == 0 {
		w.own0 = w.ownership()
	}
	return nil
}

// clockedStage names a stage of spec after stage whose ps workers count
// clocks ("" when none does): keys moved in this stage stay moved for it
// (kvstore.ClientConfig.ClockedStage). repeat lists every copy of the
// stages, so a later copy of an earlier stage is one of them.
func clockedStage(spec *tasks.MultiStageTask, stage int) string {
	if spec == nil {
		return ""
	}
	for i, s := range spec.Stages {
		if i <= stage || s.WorkerKind != "" && s.WorkerKind != tasks.KindPS {
			continue
		}
		switch s.Consistency.Kind {
		case kvstore.BSP, kvstore.SSP, kvstore.SparseSSP:
			return fmt.Sprintf("%d (%s, %s)", i, s.Name, s.Consistency.Kind)
		}
	}
	return ""
}

// Table implements tasks.Runtime.
func (w *worker) Table(name string) (tasks.Table, error) {
	if t, ok := w.tables[name]; ok {
		return t, nil
	}
	if w.local != nil {
		e, err := w.local.table(w.ctx, name)
		if err != nil {
			return nil, err
		}
		t := &localTable{w: w, e: e}
		w.tables[name] = t
		return t, nil
	}
	for _, p := range w.req.Tables {
		if p.Spec.Name == name {
			t, err := w.client.Table(p)
			if err != nil {
				return nil, err
			}
			if w.stage.Cache == "lru" || w.stage.Cache == "lfu" {
				ct, err := kvstore.NewCachedTable(t, kvstore.CacheKind(w.stage.Cache), w.stage.CacheSize)
				if err != nil {
					return nil, err
				}
				w.caches = append(w.caches, ct)
				w.tables[name] = ct
				return ct, nil
			}
			w.tables[name] = t
			return t, nil
		}
	}
	return nil, fmt.Errorf("task %s declares no table %q", w.req.Spec.Name, name)
}

// Clock implements tasks.Runtime.
func (w *worker) Clock() error {
	// A stopped worker (cancel, Ctrl-C, a trial's end, the cluster closing)
	// learns it here, at the end of its iteration, also when every key it
	// touches is in this slave's memory: those Gets and Adds never fail, so
	// a stage function looping on them ran on for good and held up Close.
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if w.misuse != nil {
		return w.misuse
	}
	if w.local != nil {
		w.localClock++
		if g := w.local.gate; g != nil {
			g.Advance(w.rank, w.localClock)
		}
		return nil
	}
	w.psClock++
	return w.client.Clock()
}

// Barrier implements tasks.Runtime: this worker's Adds are applied first
// (one-slave stages write to shared memory directly), then the master
// releases the barrier once every worker of the stage arrived.
func (w *worker) Barrier() error { return w.barrier(0) }

// barrier is Barrier; epoch > 0 tells the master it ends that epoch, so
// it may take a checkpoint before releasing it.
func (w *worker) barrier(epoch int) error {
	if w.misuse != nil {
		return w.misuse
	}
	w.barriers++
	// Workers reach a barrier after different numbers of iterations (they
	// pull their blocks), so under BSP/SSP one waiting here at clock c
	// would hold back another still at a lower clock, which then never
	// arrives. Entering barrier n jumps the clock to n<<40, past any
	// iteration count before it: a waiting worker holds nobody back, and
	// after the barrier everyone counts on from the same clock.
	barrierClock := int64(w.barriers) << 40
	if w.local == nil {
		w.psClock = max(w.psClock, barrierClock)
		if err := w.client.ClockTo(barrierClock); err != nil {
			return err
		}
		if err := w.client.Flush(); err != nil {
			return err
		}
	} else if w.localClock < barrierClock {
		w.localClock = barrierClock
		if g := w.local.gate; g != nil {
			g.Advance(w.rank, w.localClock)
		}
	}
	req, err := json.Marshal(proto.BarrierRequest{Task: w.req.Task, Stage: w.req.Stage, Rank: w.rank, Seq: w.barriers, Epoch: epoch})
	if err != nil {
		return err
	}
	ctx := w.ctx
	if w.local != nil {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(w.ctx)
		defer cancel(nil)
		go w.local.watchBarrier(ctx, w.barriers, cancel)
	}
	msg, err := w.s.askMaster(ctx, w.s.subj.Barrier(), req, 0) // as long as the slowest worker takes
	if err != nil {
		if w.ctx.Err() != nil {
			// Stopped meanwhile: the worker's end says why (it said the
			// cause twice, and counted the worker failed).
			return fmt.Errorf("barrier %d: %w", w.barriers, w.ctx.Err())
		}
		if cause := context.Cause(ctx); cause != nil {
			return fmt.Errorf("barrier %d: %w", w.barriers, cause)
		}
		return fmt.Errorf("barrier %d: asking the master: %w", w.barriers, err)
	}
	var rep proto.CtlReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return fmt.Errorf("barrier %d: malformed answer from the master", w.barriers)
	}
	if !rep.OK && rep.Stopped { // another worker's failure, a cancel: not this worker's error
		return fmt.Errorf("barrier %d: %w: %s", w.barriers, errStageStopped, rep.Error)
	}
	if !rep.OK {
		return fmt.Errorf("barrier %d: %s", w.barriers, rep.Error)
	}
	if rep.Live != nil {
		w.live = rep.Live
	}
	return nil
}

// Live implements tasks.Runtime: the live ranks the last barrier's answer
// named (nil while every worker lives).
func (w *worker) Live() []int { return w.live }

// Report implements tasks.Runtime.
func (w *worker) Report(p tasks.Progress) {
	w.s.metrics.samples.Add(p.Samples)
	w.progress.Samples += p.Samples
	w.progress.LossSum += p.LossSum
	if time.Since(w.lastReport) >= w.s.cfg.ProgressEvery {
		w.flushProgress()
	}
}

func (w *worker) flushProgress() {
	w.lastReport = time.Now()
	if w.progress.Samples == 0 && w.progress.LossSum == 0 {
		return
	}
	w.s.report(w.gen, proto.WorkerEvent{Task: w.req.Task, Stage: w.req.Stage, Rank: w.rank, Kind: proto.WorkerProgress,
		Samples: w.progress.Samples, LossSum: w.progress.LossSum})
	w.progress = tasks.Progress{}
}

// ReportEpoch implements tasks.Runtime.
func (w *worker) ReportEpoch(epoch int, metrics map[string]float64) {
	if w.misuse == nil {
		switch {
		case epoch < 1:
			w.misuse = fmt.Errorf("the stage function reported epoch %d: epochs count from 1 (a resumed stage's first is Info.StartEpoch+1)", epoch)
		case epoch < w.lastEpoch:
			w.misuse = fmt.Errorf("the stage function reported epoch %d after epoch %d: epochs are reported in order", epoch, w.lastEpoch)
		}
	}
	if w.misuse != nil {
		// Not sent: the master would show and sum it as an epoch.
		return
	}
	w.lastEpoch = epoch
	w.flushProgress()
	now := time.Now()
	w.s.report(w.gen, proto.WorkerEvent{Task: w.req.Task, Stage: w.req.Stage, Rank: w.rank, Kind: proto.WorkerEpoch,
		Epoch: epoch, Seconds: now.Sub(w.epochStart).Seconds(), Metrics: metrics})
	if w.req.EpochBarrier && w.local == nil {
		// A checkpoint point: wait while the master may snapshot the
		// tables. A failure means the stage is ending; the worker's next
		// table access or clock reports why.
		if err := w.barrier(epoch); err != nil {
			w.s.log.Debug().Err(err).Str("task", w.req.Task).Int("stage", w.req.Stage).Int("worker", w.rank).Msg("checkpoint barrier")
		}
	}
	w.epochStart = time.Now()
}

// readMetrics sums what the worker's passes read, for the stage summary.
func (w *worker) readMetrics() map[string]float64 {
	m := map[string]float64{}
	for _, p := range w.reads {
		m[tasks.MetricReadBytes] += float64(p.Bytes)
		m[tasks.MetricReadLocalBytes] += float64(p.LocalBytes)
		m[tasks.MetricReadWaitSeconds] += p.WaitTime.Seconds()
		m[tasks.MetricReadRecords] += float64(p.Records)
		m[tasks.MetricReadCachedBlocks] += float64(p.CachedBlocks)
		m[tasks.MetricReadBlocks] += float64(p.Blocks)
		m[tasks.MetricBadLines] += float64(p.BadLines)
	}
	// Time this worker's reads were held back by the consistency model:
	// by the in-process gate of a one-slave stage, or by this slave's
	// shard gate (reads of remote shards wait on their hosts' gates,
	// which show up as round-trip time instead).
	var g *kvstore.Gate
	if w.local != nil {
		g = w.local.gate
	} else if w.s.kv != nil {
		g = w.s.kv.Gate(w.req.Task, int32(w.req.Stage))
	}
	if g != nil {
		reads, waits, blocked := g.Stats(w.rank)
		m[tasks.MetricConsistencyReads] = float64(reads)
		m[tasks.MetricConsistencyWaits] = float64(waits)
		m[tasks.MetricBlockedSeconds] = blocked.Seconds()
	}
	for _, c := range w.caches {
		st := c.Stats()
		m[tasks.MetricCacheHits] += float64(st.Hits)
		m[tasks.MetricCacheMisses] += float64(st.Misses)
		m[tasks.MetricCacheEvictions] += float64(st.Evictions)
		m[tasks.MetricCacheStale] += float64(st.Stale)
		m[tasks.MetricCacheBypassed] += float64(st.Bypassed)
		m[tasks.MetricCacheRefreshed] += float64(st.Refreshed)
	}
	if w.client != nil {
		st := w.client.Stats()
		m[tasks.MetricKVLocalKeys] = float64(st.LocalKeys)
		m[tasks.MetricKVRemoteKeys] = float64(st.RemoteKeys)
		m[tasks.MetricKVRequests] = float64(st.Requests)
		m[tasks.MetricKVBytesSent] = float64(st.BytesSent)
		m[tasks.MetricKVLocalized] = float64(st.Localized)
		m[tasks.MetricKVFlushes] = float64(st.Flushes)
	}
	if w.localRank == 0 && w.local == nil && w.s.kv != nil {
		o := w.ownership()
		m[tasks.MetricKVRelocated] = float64(o.Installed - w.own0.Installed)
		m[tasks.MetricKVOwnedKeys] = float64(o.Owned)
		m[tasks.MetricKVGuestKeys] = float64(o.Guests)
		m[tasks.MetricKVLocalizes] = float64(o.Localizes - w.own0.Localizes)
		m[tasks.MetricKVRelocMsgs] = float64(o.Sent - w.own0.Sent)
		for b, n := range o.Latency {
			if d := n - w.own0.Latency[b]; d > 0 {
				m[fmt.Sprintf("%s%02d", tasks.MetricKVLocalizeLatency, b)] = float64(d)
			}
		}
	}
	return m
}

// ownership sums this slave's ownership counters over the task's tables.
func (w *worker) ownership() kvstore.OwnershipStats {
	var sum kvstore.OwnershipStats
	for _, st := range w.s.kv.OwnershipStats(w.req.Task) {
		sum.Installed += st.Installed
		sum.Owned += st.Owned
		sum.Guests += st.Guests
		sum.Localizes += st.Localizes
		sum.Sent += st.Sent
		for b, n := range st.Latency {
			sum.Latency[b] += n
		}
	}
	return sum
}

// Input implements tasks.Runtime.
func (w *worker) Input(name string) (tasks.Input, error) {
	spec, ok := w.req.Spec.Inputs[name]
	if !ok {
		return nil, fmt.Errorf("task %s declares no input %q", w.req.Spec.Name, name)
	}
	if len(w.stage.Inputs) > 0 {
		found := false
		for _, in := range w.stage.Inputs {
			found = found || in == name
		}
		if !found {
			return nil, fmt.Errorf("stage %s does not read input %q (its inputs: %v)", w.stage.Name, name, w.stage.Inputs)
		}
	}
	f, err := datastore.NewFormat(spec.Format, spec.FormatOptions())
	if err != nil {
		return nil, fmt.Errorf("input %q: %w", name, err)
	}
	return &input{w: w, name: name, format: f, read: datastore.ReadOptions{OnError: spec.OnError, MaxBadFraction: spec.MaxBadFraction}}, nil
}

// input is a worker's share of one input: every Pass is an epoch whose
// blocks come from the master's FileAssigner, one request per block.
type input struct {
	w      *worker
	name   string
	format datastore.Format
	read   datastore.ReadOptions
	epoch  int
	// asking counts the block requests in flight (idle ticks, below).
	asking atomic.Int32
	// seq numbers the requests for a block (proto.BlockRequest.Seq).
	seq atomic.Int64
}

// FormatName implements tasks.FormatNamer.
func (in *input) FormatName() string { return in.format.Name() }

// Pass implements tasks.Input.
func (in *input) Pass(ctx context.Context) (datastore.Pass, error) { return in.pass(ctx, false) }

// OrderedPass implements tasks.OrderedInput: one producer, so each block's
// batches come whole, before the next block's; when a block is confirmed
// the function has seen no record of a later one.
func (in *input) OrderedPass(ctx context.Context) (datastore.Pass, error) { return in.pass(ctx, true) }

func (in *input) pass(ctx context.Context, ordered bool) (datastore.Pass, error) {
	w := in.w
	epoch := in.epoch
	in.epoch++
	next := func(ctx context.Context) (datastore.Block, bool, error) {
		for {
			in.asking.Add(1)
			rep, err := in.ask(ctx, proto.BlockRequest{Epoch: epoch, Seq: in.seq.Add(1)}, "asking the master for a block")
			in.asking.Add(-1)
			if err != nil {
				return datastore.Block{}, false, err
			}
			if !rep.Retry {
				return rep.Block, !rep.Done, nil
			}
			// The epoch's last blocks are still with other workers, who
			// may die before finishing them: ask again.
		}
	}
	// Each block the function finished is confirmed: the master tells no
	// worker an epoch is over before every block of it is (workers with
	// nothing left wait instead of running on into the next epoch), and
	// in a stage that survives a slave's death a confirmed block is not
	// re-run if this worker dies. There, the function's commit
	// (tasks.BlockCommitter), if it set one, then adds what it summed
	// from the block in its own memory (elsewhere it adds it after the
	// pass, in one write instead of one per block). In this order
	// a worker that dies between the two loses at most that block's sums
	// (the window of one Add); the other order would count the block twice
	// (its sums applied, the survivors running it again), which a drill
	// hit in most kills: the window was a Flush plus the confirmation.
	var done func(datastore.Block) error
	commit := new(func() error)
	if in.confirms() {
		done = func(b datastore.Block) error {
			if _, err := in.ask(ctx, proto.BlockRequest{Epoch: epoch, Confirm: &b}, "confirming block "+b.String()); err != nil {
				return err
			}
			if c := *commit; c != nil && w.req.Survivable {
				return c()
			}
			return nil
		}
	}
	host := w.s.cfg.Host
	producers := w.s.cfg.ReadProducers
	if w.stage.WorkerKind == tasks.KindSingle || ordered && in.confirms() && w.req.Survivable {
		// One producer hands the batches over in the assigner's block
		// order, so a single worker is reproducible run to run, and a
		// confirmation (which a death makes final) covers exactly the
		// blocks the function has seen.
		producers = 1
	}
	r := datastore.NewAsyncReader(ctx, datastore.AsyncConfig{
		Source: w.s.sources, Format: in.format, Read: in.read, BufferBytes: w.s.cfg.ReadBuffer,
		Producers: producers, Next: next, Done: done,
		Cache: w.s.cache, CacheScope: w.req.Task + "/" + in.name,
		IsLocal: func(b datastore.Block) bool {
			for _, h := range b.Hosts {
				if h == host {
					return true
				}
			}
			return false
		},
	})
	return &trackedPass{AsyncReader: r, w: w, in: in, epoch: epoch, ctx: ctx, commit: commit}, nil
}

// confirms reports whether the worker confirms the blocks it finished:
// in a stage of more than one worker (tasks.Stage.SettlesEpochs; the
// master holds their epoch ends, master/blocks.go).
func (in *input) confirms() bool {
	return in.w.stage.SettlesEpochs()
}

// ask sends a block request for this worker and input (what fills in the
// rest of req) and returns the master's answer; what says what for errors.
func (in *input) ask(ctx context.Context, req proto.BlockRequest, what string) (proto.BlockReply, error) {
	w := in.w
	req.Task, req.Stage, req.Input, req.Rank = w.req.Task, w.req.Stage, in.name, w.rank
	req.Slave, req.Instance = w.s.cfg.ID, w.s.self().instance
	data, err := json.Marshal(req)
	if err != nil {
		return proto.BlockReply{}, fmt.Errorf("input %q: encoding the block request: %w", in.name, err)
	}
	msg, err := w.s.askMaster(ctx, w.s.subj.Block(), data, w.s.cfg.KVTimeout)
	if err != nil {
		return proto.BlockReply{}, fmt.Errorf("input %q: %s: %w", in.name, what, err)
	}
	var rep proto.BlockReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return proto.BlockReply{}, fmt.Errorf("input %q: %s: malformed reply", in.name, what)
	}
	if rep.Stopped {
		return proto.BlockReply{}, fmt.Errorf("input %q: %s: %w: %s", in.name, what, errStageStopped, rep.Error)
	}
	if rep.Error != "" {
		return proto.BlockReply{}, fmt.Errorf("input %q: %s: %s", in.name, what, rep.Error)
	}
	return rep, nil
}

// trackedPass records a pass's statistics when it is closed, and, in a
// stage whose workers confirm blocks, gives up the blocks of a pass the
// function closed before its end.
type trackedPass struct {
	*datastore.AsyncReader
	w     *worker
	in    *input
	epoch int
	ctx   context.Context
	eof   bool
	done  bool
	// commit is the function's tasks.BlockCommitter hook (nil: none).
	commit *func() error
}

// OnConfirm implements tasks.BlockCommitter: in a stage whose workers
// confirm their blocks, f runs after each confirmation, on the function's
// goroutine (inside Next).
func (p *trackedPass) OnConfirm(f func() error) { *p.commit = f }

// idleEvery is how often a worker starved at its epoch's end checks
// whether others wait for its clock.
const idleEvery = 5 * time.Millisecond

// Next notes the pass's end. In a stage whose workers confirm blocks under
// a clock-gated consistency model (BSP, SSP), a worker whose pass is
// starved because the master holds its block request at the epoch's end
// (blocks of the epoch are still with other workers) ticks its clock
// whenever it is the slowest: those others may be waiting for its clock to
// read, and the master for them to finish their blocks. Each tick is an
// empty iteration; a worker never ticks past the slowest of the others.
func (p *trackedPass) Next(ctx context.Context) (*datastore.Records, error) {
	if !p.in.idleTicks() {
		rec, err := p.AsyncReader.Next(ctx)
		p.eof = p.eof || err == io.EOF
		return rec, err
	}
	w := p.w
	for {
		sub, cancel := context.WithTimeout(ctx, idleEvery)
		rec, err := p.AsyncReader.Next(sub)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			p.eof = p.eof || err == io.EOF
			return rec, err
		}
		if p.in.asking.Load() == 0 {
			continue // starved by reading, not by the master
		}
		if !w.holdsBack() {
			continue // nobody waits for this worker
		}
		if err := w.Clock(); err != nil {
			return nil, err
		}
	}
}

// holdsBack reports whether other workers of the stage may be waiting
// for this worker's clock: it is the slowest (or its gate is not known).
func (w *worker) holdsBack() bool {
	if w.local != nil {
		g := w.local.gate
		return g == nil || w.localClock <= g.MinClock()
	}
	g := w.s.kv.Gate(w.req.Task, int32(w.req.Stage))
	return g == nil || w.psClock <= g.MinClock()
}

// idleTicks reports whether a starved pass ticks the worker's clock.
func (in *input) idleTicks() bool {
	return in.confirms() && in.w.req.Consistency.Kind != kvstore.ASP
}

func (p *trackedPass) Close() error {
	err := p.AsyncReader.Close()
	if !p.done && !p.eof && p.in.confirms() && p.ctx.Err() == nil && p.w.ctx.Err() == nil {
		// Closed early by choice: the blocks this worker holds are not to
		// be waited for, nor re-run. (A worker stopped from outside keeps
		// them: if its slave died, the survivors re-run them.)
		// Not an error of the pass, whose data was read: the master also
		// gives up a worker's blocks when it returns, and a stage that
		// ended has nothing to give up.
		if _, aerr := p.in.ask(p.w.ctx, proto.BlockRequest{Epoch: p.epoch, Abandon: true}, "giving up the rest of the pass"); aerr != nil {
			p.w.s.log.Debug().Err(aerr).Str("task", p.w.req.Task).Int("stage", p.w.req.Stage).Int("worker", p.w.rank).Msg("blocks of a pass closed early not given up; they are when the worker returns")
		}
	}
	if !p.done {
		p.done = true
		st := p.AsyncReader.Stats()
		if p.epoch > 0 {
			// The first pass handed every block of the input to one
			// worker, which counted its malformed lines. A later pass
			// parses a block again only when this slave's cache does
			// not replay it (it is full, or another slave read the
			// block before): the same lines, counted once already.
			st.BadLines = 0
		}
		p.w.reads = append(p.w.reads, st)
		s := p.w.s
		if cs := s.cache.Stats(); !s.cacheLogged.Load() {
			switch {
			case cs.Full && s.cacheLogged.CompareAndSwap(false, true):
				s.log.Info().Int64("budget", cs.Budget).Int64("used", cs.Used).
					Msg("parsed input does not fit the data cache: blocks beyond the budget are re-read from the source every epoch ([data] cache)")
			case st.CachedBlocks > 0 && s.cacheLogged.CompareAndSwap(false, true):
				s.log.Info().Int64("budget", cs.Budget).Int64("used", cs.Used).Msg("parsed input fits the data cache: later epochs replay it from memory")
			}
		}
	}
	return err
}
