package kvstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// ErrGateClosed is what pending and future reads get from a Gate closed
// with a nil error.
var ErrGateClosed = errors.New("kvstore: consistency gate closed")

// ErrBadWorker is returned for a worker index outside [0, workers).
var ErrBadWorker = errors.New("kvstore: worker index out of range")

// Gate is the goroutine-safe face of a Controller for the engine: reads
// wait on it (Wait) or leave a callback (park, for the server); Advance and Finish
// release them. Callbacks run outside the gate's lock, on the goroutine
// that released them.
//
// Under ASP, BSP and SSP the common case takes no lock: every worker has
// its own cache line holding its clock and its count of reads, and the
// gate publishes a lower bound of the slowest live worker's clock (min).
// A read whose clock is within the bound of min proceeds at once; so does
// an Advance while no read is parked (it only raises min when the worker
// may have been the slowest). Everything else (a read that may have to
// wait, an Advance or Finish that may release one) takes the lock and
// first brings the controller up to date with the workers' clocks. A
// parked read and an Advance cannot miss each other: the read counts
// itself in waiters before reading the clocks, the Advance stores its
// clock before reading waiters (both sequentially consistent atomics), so
// at least one of them sees the other. SparseSSP, whose rule needs the
// keys every worker reads, always takes the lock.
type Gate struct {
	mu      sync.Mutex
	ctrl    *Controller
	sparse  bool
	nextID  uint64
	pending map[uint64]func(error)
	closed  error

	bound   int64        // the controller's bound; -1: ASP
	min     atomic.Int64 // <= every live worker's clock; only rises
	waiters atomic.Int32 // parked reads plus reads in the locked path
	shut    atomic.Bool  // closed is set
	workers []gateWorker
	// spin is how long Wait polls before it parks (0: it parks at once);
	// see SpinBeforePark.
	spin time.Duration
}

// gateWorker is one worker's lock-free state, on a cache line of its own
// so workers that advance do not invalidate each other's lines.
type gateWorker struct {
	clock atomic.Int64 // the latest clock Advance was given
	reads atomic.Int64 // reads that proceeded without the lock
	done  atomic.Bool  // finished (set under mu)
	// reads that had to wait but proceeded while polling (SpinBeforePark),
	// and the time they polled, in nanoseconds
	spun, spunNanos atomic.Int64
	_               [64 - 40]byte
}

// NewGate returns a gate for workers workers under c, timed by time.Now.
func NewGate(c Consistency, workers int) *Gate {
	g := &Gate{
		ctrl:    NewController(c, workers, time.Now),
		sparse:  c.Kind == SparseSSP,
		pending: make(map[uint64]func(error)),
		bound:   int64(c.Bound()),
		workers: make([]gateWorker, max(workers, 0)),
	}
	if c.Kind == ASP {
		g.bound = -1
	}
	g.min.Store(g.ctrl.MinClock())
	return g
}

// sync gives the controller the clocks Advance stored without the lock,
// publishes its min and returns the reads that released. Caller holds mu.
func (g *Gate) sync() (ready []uint64) {
	for w := range g.workers {
		ready = append(ready, g.ctrl.Advance(w, g.workers[w].clock.Load())...)
	}
	g.raise(g.ctrl.MinClock())
	return ready
}

// raise publishes m as min unless min is higher already.
func (g *Gate) raise(m int64) {
	for {
		old := g.min.Load()
		if m <= old || g.min.CompareAndSwap(old, m) {
			return
		}
	}
}

// fastRead reports whether worker's read at clock may proceed without the
// lock, counting it if so.
func (g *Gate) fastRead(worker int, clock int64) bool {
	if !g.ready(worker, clock) {
		return false
	}
	g.workers[worker].reads.Add(1)
	return true
}

// ready reports whether worker's read at clock may proceed now, as far as
// the clocks already synced tell (false when unsure), counting nothing.
func (g *Gate) ready(worker int, clock int64) bool {
	if g.sparse || worker < 0 || worker >= len(g.workers) || g.shut.Load() {
		return false
	}
	return g.bound < 0 || clock-g.min.Load() <= g.bound
}

// enter checks a read; if it may not proceed it parks fn under a new id
// and returns that id. A nil fn parks a send on a new channel, returned as
// ch: it is made only then, so a read that may proceed (the common case)
// allocates nothing. It returns the fns released meanwhile (by the clocks
// it synced; under SparseSSP by the keys it recorded).
func (g *Gate) enter(worker int, clock int64, keys []uint64, fn func(error)) (id uint64, ch chan error, now error, parked bool, released []func(error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		return 0, nil, g.closed, false, nil
	}
	if !g.ctrl.valid(worker) {
		return 0, nil, fmt.Errorf("%w: %d of %d", ErrBadWorker, worker, len(g.ctrl.clocks)), false, nil
	}
	g.waiters.Add(1) // before reading the clocks: see Gate
	ready := g.sync()
	if g.ctrl.Check(worker, clock, keys) {
		g.waiters.Add(-1)
		if g.sparse {
			ready = append(ready, g.ctrl.Poll()...)
		}
		return 0, nil, nil, false, g.take(ready)
	}
	g.nextID++
	id = g.nextID
	g.ctrl.Park(id, worker, clock, keys)
	if fn == nil {
		c := make(chan error, 1)
		fn = func(err error) { c <- err }
		ch = c
	}
	g.pending[id] = fn
	if g.sparse {
		ready = append(ready, g.ctrl.Poll()...)
	}
	return id, ch, nil, true, g.take(ready)
}

// take removes the callbacks of ids from pending. Caller holds mu.
func (g *Gate) take(ids []uint64) []func(error) {
	if len(ids) == 0 {
		return nil
	}
	fns := make([]func(error), 0, len(ids))
	for _, id := range ids {
		if fn, ok := g.pending[id]; ok {
			fns = append(fns, fn)
			delete(g.pending, id)
			g.waiters.Add(-1)
		}
	}
	return fns
}

func run(fns []func(error), err error) {
	for _, fn := range fns {
		fn(err)
	}
}

// SpinBeforePark makes Wait poll for up to d, yielding the processor
// between polls, before it parks a read that may not proceed yet. For a
// gate whose workers all run in this process (the local kinds'): the
// worker a read waits for is a few microseconds from its next clock, and
// parking a goroutine and waking it again costs more than that on a busy
// machine (the other worker, waking it, pays for it too). Call it before
// the gate is used.
func (g *Gate) SpinBeforePark(d time.Duration) { g.spin = d }

// Wait blocks until worker's read of keys at clock may proceed, ctx is
// done (ctx.Err()), or the gate is closed (its error).
func (g *Gate) Wait(ctx context.Context, worker int, clock int64, keys []uint64) error {
	if g.fastRead(worker, clock) {
		return nil
	}
	if g.spin > 0 && g.poll(worker, clock) {
		return nil
	}
	id, ch, err, parked, released := g.enter(worker, clock, keys, nil)
	run(released, nil)
	if !parked {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
	}
	g.mu.Lock()
	_, still := g.pending[id]
	if still {
		delete(g.pending, id)
		g.waiters.Add(-1)
		g.ctrl.Cancel(id)
	}
	g.mu.Unlock()
	if !still { // released or failed meanwhile: its answer is on ch
		return <-ch
	}
	return ctx.Err()
}

// poll waits up to g.spin for worker's read at clock to be allowed without
// the lock (see SpinBeforePark), yielding between checks so that the
// worker it waits for can run on this processor; it reports whether it was.
func (g *Gate) poll(worker int, clock int64) bool {
	if g.sparse || worker < 0 || worker >= len(g.workers) {
		return false
	}
	start := time.Now()
	for {
		runtime.Gosched()
		waited := time.Since(start)
		if g.ready(worker, clock) {
			me := &g.workers[worker]
			me.spun.Add(1)
			me.spunNanos.Add(int64(waited))
			return true
		}
		if waited >= g.spin || g.shut.Load() {
			g.workers[worker].spunNanos.Add(int64(waited)) // blocked time, though the read parks now
			return false
		}
	}
}

// park calls fn(nil) once worker's read may proceed: synchronously if it
// may now, else later from the goroutine that calls Advance or Finish.
// On Close (or an invalid worker) fn gets the error. fn must not block long.
func (g *Gate) park(worker int, clock int64, keys []uint64, fn func(error)) {
	if g.fastRead(worker, clock) {
		fn(nil)
		return
	}
	_, _, err, parked, released := g.enter(worker, clock, keys, fn)
	run(released, nil)
	if !parked {
		fn(err)
	}
}

// Advance moves worker's clock forward (lower or equal clocks are
// ignored) and releases the reads it unblocks.
func (g *Gate) Advance(worker int, clock int64) {
	if worker < 0 || worker >= len(g.workers) {
		return
	}
	me := &g.workers[worker]
	old := me.clock.Load()
	for {
		if clock <= old {
			return
		}
		if me.clock.CompareAndSwap(old, clock) {
			break
		}
		old = me.clock.Load()
	}
	if !g.sparse {
		if old <= g.min.Load() {
			g.raise(g.scanMin()) // it may have been the slowest
		}
		if g.waiters.Load() == 0 { // after the Store: see Gate
			return
		}
	}
	g.mu.Lock()
	fns := g.take(g.sync())
	g.mu.Unlock()
	run(fns, nil)
}

// scanMin is the smallest clock of the workers not known to be finished,
// math.MaxInt64 if none: a lower bound of min, read without the lock
// (clocks only rise, a finished worker only stops counting).
func (g *Gate) scanMin() int64 {
	m := int64(math.MaxInt64)
	for w := range g.workers {
		if gw := &g.workers[w]; !gw.done.Load() {
			m = min(m, gw.clock.Load())
		}
	}
	return m
}

// Finish marks worker done and releases the reads it held back.
func (g *Gate) Finish(worker int) {
	g.mu.Lock()
	ready := g.sync()
	ready = append(ready, g.ctrl.Finish(worker)...)
	if g.ctrl.valid(worker) {
		g.workers[worker].done.Store(true)
	}
	g.raise(g.ctrl.MinClock())
	fns := g.take(ready)
	g.mu.Unlock()
	run(fns, nil)
}

// Close fails every pending read and all future ones with err
// (ErrGateClosed when nil). Later Closes are no-ops.
func (g *Gate) Close(err error) {
	if err == nil {
		err = ErrGateClosed
	}
	g.mu.Lock()
	if g.closed != nil {
		g.mu.Unlock()
		return
	}
	g.closed = err
	g.shut.Store(true)
	fns := make([]func(error), 0, len(g.pending))
	for id, fn := range g.pending {
		g.ctrl.Cancel(id)
		fns = append(fns, fn)
		g.waiters.Add(-1)
	}
	clear(g.pending)
	g.mu.Unlock()
	run(fns, err)
}

// Stats returns worker's read count, how many had to wait, and the total
// time they spent waiting.
func (g *Gate) Stats(worker int) (reads, waits int64, blocked time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	reads, waits, blocked = g.ctrl.Reads(worker), g.ctrl.Waits(worker), g.ctrl.BlockedTime(worker)
	if g.ctrl.valid(worker) {
		me := &g.workers[worker]
		spun := me.spun.Load()
		reads += me.reads.Load() + spun
		waits += spun
		blocked += time.Duration(me.spunNanos.Load())
	}
	return reads, waits, blocked
}

// MinClock is the slowest unfinished worker's clock: every Add of an
// iteration below it has been applied. Read it before reading values to
// stamp them conservatively.
func (g *Gate) MinClock() int64 {
	g.mu.Lock()
	fns := g.take(g.sync())
	m := g.ctrl.MinClock()
	g.mu.Unlock()
	run(fns, nil)
	return m
}
