package slave

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"time"
)

// A worker's slot is taken until its goroutine returns, not until its
// stage ends: a stage function that ignores its context (info.Ctx) keeps
// running, on the slave's cores, after the master stopped or cancelled
// its stage. The slave counts such workers (lingering: their stage's
// context was cancelled with a cause, and they still run) in its
// heartbeats and control answers, and the master hands out only the
// slots they leave. A control request that stops workers is answered
// once they returned or after settleWait, whichever comes first, so that
// workers which do return at once are not counted. Each lingering worker
// is logged once it has run on lingerWarn past its cancellation, and
// then every lingerRewarn.
const (
	settleWait   = 200 * time.Millisecond
	lingerWarn   = 10 * time.Second
	lingerRewarn = time.Minute
)

// lingerSet tracks the slave's running workers and whether each one's
// stage context was cancelled with a cause (a stage ending normally
// cancels without one, once its workers are done).
type lingerSet struct {
	mu      sync.Mutex
	running map[*worker]*lingerEntry
}

type lingerEntry struct {
	task   string
	ctx    context.Context
	seen   time.Time // when count first found it stopped
	warned time.Time // last warning
}

// add registers a worker about to start; done must be called when it
// returns.
func (l *lingerSet) add(w *worker, task string, ctx context.Context) {
	l.mu.Lock()
	if l.running == nil {
		l.running = map[*worker]*lingerEntry{}
	}
	l.running[w] = &lingerEntry{task: task, ctx: ctx}
	l.mu.Unlock()
}

func (l *lingerSet) done(w *worker) {
	l.mu.Lock()
	delete(l.running, w)
	l.mu.Unlock()
}

// count is how many workers were stopped and still run (of task only,
// unless it is ""); warn (if not nil) is called for those due a warning,
// with how long ago they were first counted.
func (l *lingerSet) count(task string, now time.Time, warn func(w *worker, since time.Duration)) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for w, e := range l.running {
		if e.ctx.Err() == nil || errors.Is(context.Cause(e.ctx), context.Canceled) || task != "" && e.task != task {
			continue
		}
		n++
		if e.seen.IsZero() {
			e.seen = now
		}
		since := now.Sub(e.seen)
		if warn != nil && since >= lingerWarn && (e.warned.IsZero() || now.Sub(e.warned) >= lingerRewarn) {
			e.warned = now
			warn(w, since)
		}
	}
	return n
}

// settle waits up to d for the stopped workers of task to return.
func (l *lingerSet) settle(task string, d time.Duration) {
	deadline := time.Now().Add(d)
	for l.count(task, time.Now(), nil) > 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
}

// lingering counts the slave's lingering workers now, logging those due a
// warning.
func (s *Slave) lingering(now time.Time) int {
	return s.linger.count("", now, func(w *worker, since time.Duration) {
		s.log.Warn().Str("task", w.req.Task).Int("stage", w.req.Stage).Str("func", w.stage.Func).Int("worker", w.rank).
			Dur("since_stopped", since.Round(time.Second)).
			Msg("a worker still runs after its stage was stopped or cancelled: the stage function ignores its context (info.Ctx); its slot stays taken until it returns")
	})
}

// runningOf is how many workers of task still run.
func (l *lingerSet) runningOf(task string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.running {
		if e.task == task {
			n++
		}
	}
	return n
}

// releaseWait bounds how long a memory release waits for the dropped
// tasks' workers to return; releaseEvery is the least time between two
// releases (each is a full collection: a stream of small tasks must not
// pay one per task).
const (
	releaseWait  = 5 * time.Second
	releaseEvery = time.Second
)

// releaser collects the tasks dropped since the last memory release.
type releaser struct {
	mu      sync.Mutex
	pending map[string]bool
	kick    chan struct{} // a release is due (buffered: one)
}

// dropped notes a dropped task whose memory should go back to the
// kernel.
func (r *releaser) dropped(task string) {
	r.mu.Lock()
	r.pending[task] = true
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// running reports whether a worker of a pending task still runs.
func (r *releaser) running(l *lingerSet) bool {
	r.mu.Lock()
	tasks := make([]string, 0, len(r.pending))
	for t := range r.pending {
		tasks = append(tasks, t)
	}
	r.mu.Unlock()
	for _, t := range tasks {
		if l.runningOf(t) > 0 {
			return true
		}
	}
	return false
}

// releaseLoop returns dropped tasks' memory (their shards, cached blocks,
// retained models) to the kernel once their workers returned (they hold
// references to it until then), instead of when Go's scavenger gets to
// it, minutes later: an idle slave should not look as if it still held
// the last task's tables. At most one release per releaseEvery.
func (s *Slave) releaseLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.release.kick:
		}
		deadline := time.Now().Add(releaseWait)
		for s.ctx.Err() == nil && time.Now().Before(deadline) && s.release.running(&s.linger) {
			time.Sleep(10 * time.Millisecond)
		}
		s.release.mu.Lock()
		clear(s.release.pending)
		s.release.mu.Unlock()
		if s.ctx.Err() != nil {
			return
		}
		debug.FreeOSMemory()
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(releaseEvery):
		}
	}
}

// closeWarn is how long Close waits for the slave's workers before it
// logs those still running, and then again every lingerRewarn; closeTick
// is how often it looks.
var (
	closeWarn = lingerWarn
	closeTick = time.Second
)

// closeWait waits for the slave's goroutines. A worker whose stage
// function ignores its context holds Close until it returns: each one is
// logged after closeWarn, naming its task, stage and function (Close
// hung without a word: the heartbeat loop that logs lingering workers
// had stopped).
func (s *Slave) closeWait() {
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	tick := time.NewTicker(min(closeTick, closeWarn))
	defer tick.Stop()
	start := time.Now()
	var warned time.Time
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			if now.Sub(start) < closeWarn || !warned.IsZero() && now.Sub(warned) < lingerRewarn {
				continue
			}
			warned = now
			s.linger.mu.Lock()
			for w := range s.linger.running {
				s.log.Error().Str("task", w.req.Task).Int("stage", w.req.Stage).Str("func", w.stage.Func).Int("worker", w.rank).
					Dur("waited", now.Sub(start).Round(time.Second)).
					Msg("Close waits for a worker whose stage function ignores its context (info.Ctx): it returns only once the function does")
			}
			s.linger.mu.Unlock()
		}
	}
}
