package lifecycle

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/scheduler"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// ErrNonFinite is wrapped by the error of a stage a worker reported a NaN
// or infinite loss or metric for.
var ErrNonFinite = errors.New("non-finite value")

// ErrNoRecords is wrapped by the error of a stage whose workers together
// trained on no record in an epoch: its input holds no data (a file of
// comments and blank lines, a filter that kept nothing), and the model it
// would write is the untrained one; or scored no record of the test input
// they report test figures of (MetricTestSamples).
var ErrNoRecords = errors.New("no records")

// DefaultProgressEvery is how often progress is published while workers
// report.
const DefaultProgressEvery = 500 * time.Millisecond

// Config describes one run of a stage.
type Config struct {
	Task      string // task id, for messages
	Stage     int    // stage index
	Name      string // stage name
	Func      string // stage function
	Workers   int    // parallelism of this run
	Placement []scheduler.Assignment
	Hosts     []string // slaves holding the task's tables
	Epochs    int      // planned epochs (0: unknown)
	// Trial > 0 makes the run a measurement: it stops the workers Trial
	// after the first tick that saw samples reported (start-up, such as a
	// stage function's first pass over its data for statistics, which only
	// the first trial of a task pays, is not measured), or TrialCap
	// trials after Begin if none came.
	Trial time.Duration
	// ProgressEvery is the least time between progress events; default
	// DefaultProgressEvery.
	ProgressEvery time.Duration
	// Survival is what the stage can lose and go on (Survivability); the
	// zero value survives nothing, as before failover existed.
	Survival Survival
}

// Phase is where a Stage is in its run.
type Phase int

// Phases of a Stage.
const (
	Placed   Phase = iota // created, Begin not yet stepped
	Starting              // start requests sent, acknowledgements outstanding
	Running               // every slave started its workers
	Stopping              // a trial ran out; workers told to stop
	Ended                 // StageFinished was returned
)

var phaseNames = [...]string{"placed", "starting", "running", "stopping", "ended"}

func (p Phase) String() string { return phaseNames[p] }

// Stage is one run of a stage; it is not safe for concurrent use (the
// driver serializes Step).
type Stage struct {
	cfg   Config
	ranks map[string][]int
	phase Phase

	started     time.Time
	acks        map[string]bool // slaves whose start was acknowledged
	ackErrs     []error
	stopped     bool
	out         map[int]bool // live ranks counted out (done, or ended by a trial's stop)
	res         status.StageResult
	epochs      map[int]*status.Epoch
	samples     int64
	warmAt      time.Time // first tick that saw samples (trials measure from there)
	warmSamples int64     // samples reported by then
	winLoss     float64
	winSamples  int64
	dirty       bool
	lastPublish time.Time
	lastNow     time.Time // latest time an event carried
	progress    status.Progress
	barriers    map[int]map[int]any // seq -> rank -> waiter
	released    map[int]bool        // the barriers released (by seq)
	published   map[int]bool        // the epochs every live worker reported
	epochRanks  map[int]map[int]bool
	// Deaths survived (failover.go): the dead slaves and their ranks,
	// and how many workers are left.
	dead     map[string]bool
	deadRank map[int]bool
	live     int
	err      error // the error the run ended with
}

// New returns a Stage for cfg in phase Placed. Ranks go to the placement's
// slaves in placement order.
func New(cfg Config) *Stage {
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = DefaultProgressEvery
	}
	s := &Stage{cfg: cfg, ranks: map[string][]int{}, acks: map[string]bool{}, epochs: map[int]*status.Epoch{},
		barriers: map[int]map[int]any{}, released: map[int]bool{}, published: map[int]bool{}, progress: status.Progress{Epochs: cfg.Epochs}, out: map[int]bool{},
		epochRanks: map[int]map[int]bool{}, dead: map[string]bool{}, deadRank: map[int]bool{}, live: cfg.Workers}
	rank := 0
	for _, a := range cfg.Placement {
		for range a.Workers {
			s.ranks[a.Slave] = append(s.ranks[a.Slave], rank)
			rank++
		}
	}
	s.res = status.StageResult{Index: cfg.Stage, Name: cfg.Name, Func: cfg.Func, Workers: cfg.Workers,
		Placement: map[string]int{}, Metrics: map[string]float64{}}
	for _, a := range cfg.Placement {
		s.res.Placement[a.Slave] += a.Workers
	}
	return s
}

// Ranks are the worker ranks placed on slave.
func (s *Stage) Ranks(slave string) []int { return s.ranks[slave] }

// Phase is the Stage's phase.
func (s *Stage) Phase() Phase { return s.phase }

// Err is why the run failed: nil while it runs and when it completed.
func (s *Stage) Err() error { return s.err }

// Progress is the stage's progress as last published.
func (s *Stage) Progress() status.Progress { return s.progress }

// Step feeds ev to the Stage and returns what the driver must do, in order.
func (s *Stage) Step(ev Event) []Action {
	if s.phase == Ended {
		if b, ok := ev.(BarrierArrived); ok {
			return []Action{ReleaseBarrier{Waiters: []any{b.Waiter}, Err: s.notRunning(b.Stage), Stopped: true}}
		}
		return nil
	}
	switch ev := ev.(type) {
	case Begin:
		return s.begin(ev)
	case Acked:
		return s.acked(ev)
	case WorkerProgress:
		return s.workerProgress(ev)
	case WorkerEpoch:
		return s.workerEpoch(ev)
	case WorkerDone:
		return s.workerDone(ev)
	case WorkerFailed:
		return s.workerFailed(ev)
	case BarrierArrived:
		return s.barrier(ev)
	case Tick:
		return s.tick(ev)
	case Cancel:
		return s.finish(ev.Err)
	case SlaveDead:
		return s.slaveDead(ev)
	case BlocksReleased:
		return s.blocksReleased(ev)
	}
	return nil
}

func (s *Stage) stageErr(err error) error {
	return fmt.Errorf("stage %d (%s): %w", s.cfg.Stage, s.cfg.Name, err)
}

func (s *Stage) notRunning(stage int) string {
	return fmt.Sprintf("task %s: barrier of stage %d, which is not running", s.cfg.Task, stage)
}

func (s *Stage) begin(ev Begin) []Action {
	if s.phase != Placed {
		return nil
	}
	s.phase, s.started, s.lastPublish = Starting, ev.Now, ev.Now
	s.observe(ev.Now)
	var out []Action
	for _, a := range s.cfg.Placement {
		if s.acks[a.Slave] || s.dead[a.Slave] {
			continue
		}
		s.acks[a.Slave] = false
		out = append(out, StartWorkers{Slave: a.Slave, Ranks: s.ranks[a.Slave]})
	}
	return out
}

// observe advances the Stage's notion of now; clocks may be coarse, so
// it never goes back.
func (s *Stage) observe(now time.Time) {
	if now.After(s.lastNow) {
		s.lastNow = now
	}
}

func (s *Stage) acked(ev Acked) []Action {
	s.observe(ev.Now)
	if s.dead[ev.Slave] {
		return nil // counted out when it died; its answer is a timeout
	}
	switch ev.Op {
	case proto.OpStartWorkers:
		if s.phase != Starting {
			return nil
		}
		if seen, ok := s.acks[ev.Slave]; !ok || seen {
			return nil
		}
		s.acks[ev.Slave] = true
		if ev.Err != nil {
			s.ackErrs = append(s.ackErrs, ev.Err)
		}
		return s.startedAll()
	case proto.OpStopStage:
		if ev.Err != nil {
			return s.finish(s.stageErr(ev.Err))
		}
	}
	return nil
}

// startedAll moves to Running once every live slave answered its start.
func (s *Stage) startedAll() []Action {
	for _, seen := range s.acks {
		if !seen {
			return nil
		}
	}
	if err := errors.Join(s.ackErrs...); err != nil {
		return s.finish(s.stageErr(err))
	}
	s.phase = Running
	// Workers may all have finished before the last acknowledgement.
	if len(s.out) >= s.live {
		return append([]Action{Publish{Kind: status.EventStatus, Progress: s.progress}}, s.complete()...)
	}
	return []Action{Publish{Kind: status.EventStatus, Progress: s.progress}}
}

// accepts reports whether a worker report for stage belongs to this run;
// reports of a dead slave's workers are not taken (their work is re-run).
func (s *Stage) accepts(stage, rank int) bool {
	return stage == s.cfg.Stage && s.phase != Placed && !s.deadRank[rank]
}

func (s *Stage) nonFinite(epoch, rank int, slave, what string, v float64) []Action {
	return s.finish(fmt.Errorf("task %s stage %d (%s) epoch %d: worker %d on slave %s reported %s = %v: %w; the model diverged, most likely because the learning rate is too high (try a smaller one)",
		s.cfg.Task, s.cfg.Stage, s.cfg.Name, epoch, rank, slave, what, v, ErrNonFinite))
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// badMetric returns the first non-finite metric in sorted key order.
func badMetric(m map[string]float64) (string, float64, bool) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !finite(m[k]) {
			return k, m[k], true
		}
	}
	return "", 0, false
}

func (s *Stage) currentEpoch() int { return s.progress.Epoch + 1 }

func (s *Stage) workerProgress(ev WorkerProgress) []Action {
	if !s.accepts(ev.Stage, ev.Rank) {
		return nil
	}
	if !finite(ev.LossSum) {
		epoch := ev.Epoch
		if epoch == 0 {
			epoch = s.currentEpoch()
		}
		return s.nonFinite(epoch, ev.Rank, ev.Slave, "loss", ev.LossSum)
	}
	s.samples += ev.Samples
	s.winSamples += ev.Samples
	s.winLoss += ev.LossSum
	s.dirty = true
	return nil
}

func (s *Stage) workerEpoch(ev WorkerEpoch) []Action {
	// A repeat (a slave sends a report until the master acknowledges it)
	// is counted once.
	if !s.accepts(ev.Stage, ev.Rank) || s.epochRanks[ev.Epoch][ev.Rank] || s.published[ev.Epoch] {
		return nil
	}
	if k, v, bad := badMetric(ev.Metrics); bad {
		return s.nonFinite(ev.Epoch, ev.Rank, ev.Slave, "metric "+k, v)
	}
	e := s.epochs[ev.Epoch]
	if e == nil {
		e = &status.Epoch{Stage: s.cfg.Stage, Epoch: ev.Epoch, Metrics: map[string]float64{}}
		s.epochs[ev.Epoch] = e
	}
	e.Workers++
	e.Seconds = max(e.Seconds, ev.Seconds)
	for key, v := range ev.Metrics {
		e.Metrics[key] += v
	}
	if s.epochRanks[ev.Epoch] == nil {
		s.epochRanks[ev.Epoch] = map[int]bool{}
	}
	s.epochRanks[ev.Epoch][ev.Rank] = true
	return s.epochDone(ev.Epoch)
}

// epochDone publishes epoch once every live worker reported it. Reports
// of workers that died after sending theirs still count in its metrics.
func (s *Stage) epochDone(epoch int) []Action {
	e := s.epochs[epoch]
	if e == nil || s.liveCount(s.epochRanks[epoch]) < s.live {
		return nil
	}
	if n, ok := e.Metrics[tasks.MetricSamples]; ok && n == 0 {
		return s.finish(fmt.Errorf("task %s stage %d (%s) epoch %d: no worker trained on a record (%w): the stage's training input holds no data lines (only blank or comment lines, or every line malformed and skipped under on_error = \"skip\"?)",
			s.cfg.Task, s.cfg.Stage, s.cfg.Name, epoch, ErrNoRecords))
	}
	if n, ok := e.Metrics[tasks.MetricTestSamples]; ok && n == 0 {
		// The stage measured its test figures on nothing: they were
		// left out of the table and the task reported success, as if
		// no test input had been asked for.
		return s.finish(fmt.Errorf("task %s stage %d (%s) epoch %d: no worker scored a test record (%w): the stage's test input holds no data lines (only blank or comment lines, or every line malformed and skipped under on_error = \"skip\"?)",
			s.cfg.Task, s.cfg.Stage, s.cfg.Name, epoch, ErrNoRecords))
	}
	s.res.Epochs = append(s.res.Epochs, *e)
	delete(s.epochs, epoch)
	delete(s.epochRanks, epoch)
	s.published[epoch] = true
	s.progress.Epoch = max(s.progress.Epoch, epoch)
	s.progress.Fraction = max(s.progress.Fraction, s.fraction())
	ep := *e
	return []Action{Publish{Kind: status.EventEpoch, Progress: s.progress, Epoch: &ep}}
}

// liveCount counts the live ranks in set.
func (s *Stage) liveCount(set map[int]bool) int {
	n := 0
	for r := range set {
		if !s.deadRank[r] {
			n++
		}
	}
	return n
}

func (s *Stage) fraction() float64 {
	if s.cfg.Epochs <= 0 {
		return 0
	}
	return min(1, float64(s.progress.Epoch)/float64(s.cfg.Epochs))
}

func (s *Stage) workerDone(ev WorkerDone) []Action {
	// A repeat (a slave sends a worker's end until the master
	// acknowledges it) is counted once.
	if !s.accepts(ev.Stage, ev.Rank) || s.out[ev.Rank] {
		return nil
	}
	if k, v, bad := badMetric(ev.Metrics); bad {
		return s.nonFinite(s.currentEpoch()-1, ev.Rank, ev.Slave, "metric "+k, v)
	}
	s.observe(ev.Now)
	s.out[ev.Rank] = true
	s.res.WorkerSeconds += ev.Seconds
	m := ev.Metrics
	s.res.WorkerStats = append(s.res.WorkerStats, status.WorkerStat{Rank: ev.Rank, Slave: ev.Slave, Seconds: ev.Seconds,
		ReadBytes: int64(m[tasks.MetricReadBytes]), LocalBytes: int64(m[tasks.MetricReadLocalBytes]),
		WaitSecs: m[tasks.MetricReadWaitSeconds], Blocks: int64(m[tasks.MetricReadBlocks]), Cached: int64(m[tasks.MetricReadCachedBlocks]),
		LocalKeys: int64(m[tasks.MetricKVLocalKeys]), RemoteKeys: int64(m[tasks.MetricKVRemoteKeys]), Localized: int64(m[tasks.MetricKVLocalized]),
		OwnedKeys: int64(m[tasks.MetricKVOwnedKeys]), GuestKeys: int64(m[tasks.MetricKVGuestKeys])})
	for _, l := range ev.BadLines {
		// Workers that read the same block in different epochs
		// skipped the same lines: listed once.
		if len(s.res.BadLines) < 5 && !slices.Contains(s.res.BadLines, l) {
			s.res.BadLines = append(s.res.BadLines, l)
		}
	}
	for key, v := range m {
		s.res.Metrics[key] += v
	}
	if out := s.abandonedBarrier(); out != nil {
		return out
	}
	return s.maybeComplete()
}

func (s *Stage) workerFailed(ev WorkerFailed) []Action {
	if !s.accepts(ev.Stage, ev.Rank) || s.out[ev.Rank] {
		return nil
	}
	if s.stopped {
		s.out[ev.Rank] = true // stopped on purpose at the end of a trial
		return s.maybeComplete()
	}
	err := fmt.Errorf("worker %d on slave %s: %s", ev.Rank, ev.Slave, ev.Err)
	// A worker usually hears of a dead peer (a reset connection) before
	// the failure detector does: say what would have let the stage
	// survive, as the death itself would.
	if why := s.lossFatal(ev.Lost); why != "" {
		err = fmt.Errorf("%w; the stage cannot survive losing slave %s: %s", err, ev.Lost, why)
	}
	return s.finish(s.stageErr(err))
}

// maybeComplete completes the stage once every worker is counted out and
// every start was acknowledged.
func (s *Stage) maybeComplete() []Action {
	if len(s.out) < s.live || s.phase == Starting {
		return nil
	}
	return s.complete()
}

func (s *Stage) barrier(ev BarrierArrived) []Action {
	if ev.Stage != s.cfg.Stage || s.phase == Placed {
		return []Action{ReleaseBarrier{Waiters: []any{ev.Waiter}, Err: s.notRunning(ev.Stage), Stopped: true}}
	}
	if s.deadRank[ev.Rank] {
		return []Action{ReleaseBarrier{Waiters: []any{ev.Waiter}, Err: s.deadErr(ev.Rank)}}
	}
	if s.released[ev.Seq] {
		return []Action{ReleaseBarrier{Waiters: []any{ev.Waiter}, Live: s.liveRanks(), Repeat: true}}
	}
	var out []Action
	b := s.barriers[ev.Seq]
	if b == nil {
		b = map[int]any{}
		s.barriers[ev.Seq] = b
	}
	if old, dup := b[ev.Rank]; dup {
		// A retried request: the earlier one is answered (its asker has
		// given up on it), the new one waits.
		out = append(out, ReleaseBarrier{Waiters: []any{old}, Err: fmt.Sprintf("worker %d arrived at barrier %d again", ev.Rank, ev.Seq)})
	}
	b[ev.Rank] = ev.Waiter
	if rel := s.releaseBarrier(ev.Seq); rel != nil {
		return append(out, rel...)
	}
	return append(out, s.abandonedBarrier()...)
}

// abandonedBarrier fails the stage when a worker still running waits at a
// barrier that a worker which returned never called: it would wait
// forever (a stage function whose rank 0 returned early while the others
// called Barrier hung its task until cancelled).
func (s *Stage) abandonedBarrier() []Action {
	if s.stopped {
		return nil
	}
	for _, seq := range slices.Sorted(maps.Keys(s.barriers)) {
		b := s.barriers[seq]
		waiting := false
		for r := range b {
			waiting = waiting || (!s.out[r] && !s.deadRank[r])
		}
		if !waiting {
			continue
		}
		for _, r := range slices.Sorted(maps.Keys(s.out)) {
			if _, arrived := b[r]; !arrived && !s.deadRank[r] {
				return s.finish(s.stageErr(fmt.Errorf("worker %d returned before its barrier %d, where other workers wait for it: "+
					"every worker of a stage must call Barrier (and, in a task that takes checkpoints, ReportEpoch) as often as the others", r, seq)))
			}
		}
	}
	return nil
}

// releaseBarrier answers barrier seq's waiters once every live rank
// arrived.
func (s *Stage) releaseBarrier(seq int) []Action {
	b := s.barriers[seq]
	if s.liveCount(mapSet(b)) < s.live {
		return nil
	}
	delete(s.barriers, seq)
	s.released[seq] = true
	ranks := slices.Sorted(maps.Keys(b))
	w := make([]any, 0, len(ranks))
	for _, r := range ranks {
		w = append(w, b[r])
	}
	return []Action{ReleaseBarrier{Waiters: w, Live: s.liveRanks()}}
}

func mapSet(m map[int]any) map[int]bool {
	out := make(map[int]bool, len(m))
	for r := range m {
		out[r] = true
	}
	return out
}

func (s *Stage) tick(ev Tick) []Action {
	if s.phase == Placed {
		return nil
	}
	s.observe(ev.Now)
	if ev.Handed > 0 && s.cfg.Epochs > 0 {
		// Never backwards: the share of a new epoch starts from zero.
		s.progress.Fraction = max(s.progress.Fraction, min(1, (float64(s.progress.Epoch)+min(ev.Handed, 1))/float64(s.cfg.Epochs)))
	}
	var out []Action
	if s.dirty && ev.Now.Sub(s.lastPublish) >= s.cfg.ProgressEvery {
		el := ev.Now.Sub(s.started).Seconds()
		s.progress.Samples = s.samples
		if s.winSamples > 0 {
			s.progress.Loss = s.winLoss / float64(s.winSamples)
		}
		s.progress.SamplesPerSec = float64(s.samples) / max(el, 1e-9)
		s.winLoss, s.winSamples, s.dirty, s.lastPublish = 0, 0, false, ev.Now
		out = append(out, Publish{Kind: status.EventProgress, Progress: s.progress})
	}
	if s.warmAt.IsZero() && s.samples > 0 {
		s.warmAt, s.warmSamples = ev.Now, s.samples
	}
	if s.cfg.Trial > 0 && s.phase == Running && s.trialOver(ev.Now) {
		// Trial over: stop the workers, then count them out as they end.
		s.phase, s.stopped = Stopping, true
		if s.warmAt.IsZero() {
			s.res.Seconds, s.res.Samples = ev.Now.Sub(s.started).Seconds(), s.samples
		} else {
			s.res.Seconds, s.res.Samples = ev.Now.Sub(s.warmAt).Seconds(), s.samples-s.warmSamples
		}
		for _, a := range s.cfg.Placement {
			if !s.dead[a.Slave] {
				out = append(out, StopWorkers{Slave: a.Slave})
			}
		}
	}
	return out
}

// TrialCap bounds a trial in which no samples were reported: it ends this
// many trial lengths after Begin.
const TrialCap = 3

// trialOver reports whether a trial has measured long enough at now:
// Trial since samples first came, or TrialCap trials since Begin.
func (s *Stage) trialOver(now time.Time) bool {
	if !now.Before(s.started.Add(TrialCap * s.cfg.Trial)) {
		return true
	}
	return !s.warmAt.IsZero() && !now.Before(s.warmAt.Add(s.cfg.Trial))
}

// complete ends a run in which every worker was counted out.
func (s *Stage) complete() []Action {
	// Epochs not every worker reported (workers may run different counts).
	for _, e := range s.epochs {
		s.res.Epochs = append(s.res.Epochs, *e)
	}
	s.epochs = map[int]*status.Epoch{}
	sort.Slice(s.res.Epochs, func(i, j int) bool { return s.res.Epochs[i].Epoch < s.res.Epochs[j].Epoch })
	sort.Slice(s.res.WorkerStats, func(i, j int) bool { return s.res.WorkerStats[i].Rank < s.res.WorkerStats[j].Rank })
	if !s.stopped {
		s.res.Seconds = s.lastNow.Sub(s.started).Seconds()
		s.res.Samples = s.samples
		s.progress.Fraction = 1
	}
	s.progress.Samples = s.samples
	out := s.closeBarriers()
	s.phase = Ended
	return append(out, StageFinished{Result: s.res, Stopped: s.stopped})
}

// finish ends a run with err.
func (s *Stage) finish(err error) []Action {
	s.err = err
	out := s.closeBarriers()
	s.phase = Ended
	return append(out, StageFinished{Result: s.res, Stopped: s.stopped, Err: err})
}

// closeBarriers answers every worker still waiting with why the stage
// ended.
func (s *Stage) closeBarriers() []Action {
	seqs := make([]int, 0, len(s.barriers))
	for q := range s.barriers {
		seqs = append(seqs, q)
	}
	sort.Ints(seqs)
	var w []any
	for _, q := range seqs {
		b := s.barriers[q]
		for _, r := range slices.Sorted(maps.Keys(b)) {
			w = append(w, b[r])
		}
	}
	s.barriers = nil
	if len(w) == 0 {
		return nil
	}
	return []Action{ReleaseBarrier{Waiters: w, Err: fmt.Sprintf("stage %d (%s) ended before every worker reached the barrier", s.cfg.Stage, s.cfg.Name), Stopped: true}}
}

// Waiting is how many workers wait at a barrier.
func (s *Stage) Waiting() int {
	n := 0
	for _, w := range s.barriers {
		n += len(w)
	}
	return n
}
