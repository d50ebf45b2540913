package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
type Gate struct {
	mu      sync.Mutex
	ctrl    *Controller
	sparse  bool
	nextID  uint64
	pending map[uint64]func(error)
	closed  error
}

// NewGate returns a gate for workers workers under c, timed by time.Now.
func NewGate(c Consistency, workers int) *Gate {
	return &Gate{
		ctrl:    NewController(c, workers, time.Now),
		sparse:  c.Kind == SparseSSP,
		pending: make(map[uint64]func(error)),
	}
}

// enter checks a read; if it may not proceed it parks fn under a new id
// and returns that id. A nil fn parks a send on a new channel, returned as
// ch: it is made only then, so a read that may proceed (the common case)
// allocates nothing. It returns the fns released meanwhile (SparseSSP).
func (g *Gate) enter(worker int, clock int64, keys []uint64, fn func(error)) (id uint64, ch chan error, now error, parked bool, released []func(error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		return 0, nil, g.closed, false, nil
	}
	if !g.ctrl.valid(worker) {
		return 0, nil, fmt.Errorf("%w: %d of %d", ErrBadWorker, worker, len(g.ctrl.clocks)), false, nil
	}
	if g.ctrl.Check(worker, clock, keys) {
		if g.sparse {
			released = g.take(g.ctrl.Poll())
		}
		return 0, nil, nil, false, released
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
		released = g.take(g.ctrl.Poll())
	}
	return id, ch, nil, true, released
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
		}
	}
	return fns
}

func run(fns []func(error), err error) {
	for _, fn := range fns {
		fn(err)
	}
}

// Wait blocks until worker's read of keys at clock may proceed, ctx is
// done (ctx.Err()), or the gate is closed (its error).
func (g *Gate) Wait(ctx context.Context, worker int, clock int64, keys []uint64) error {
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
		g.ctrl.Cancel(id)
	}
	g.mu.Unlock()
	if !still { // released or failed meanwhile: its answer is on ch
		return <-ch
	}
	return ctx.Err()
}

// park calls fn(nil) once worker's read may proceed: synchronously if it
// may now, else later from the goroutine that calls Advance or Finish.
// On Close (or an invalid worker) fn gets the error. fn must not block long.
func (g *Gate) park(worker int, clock int64, keys []uint64, fn func(error)) {
	_, _, err, parked, released := g.enter(worker, clock, keys, fn)
	run(released, nil)
	if !parked {
		fn(err)
	}
}

// Advance moves worker's clock forward and releases the reads it unblocks.
func (g *Gate) Advance(worker int, clock int64) {
	g.mu.Lock()
	fns := g.take(g.ctrl.Advance(worker, clock))
	g.mu.Unlock()
	run(fns, nil)
}

// Finish marks worker done and releases the reads it held back.
func (g *Gate) Finish(worker int) {
	g.mu.Lock()
	fns := g.take(g.ctrl.Finish(worker))
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
	fns := make([]func(error), 0, len(g.pending))
	for id, fn := range g.pending {
		g.ctrl.Cancel(id)
		fns = append(fns, fn)
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
	return g.ctrl.Reads(worker), g.ctrl.Waits(worker), g.ctrl.BlockedTime(worker)
}

// MinClock is the slowest unfinished worker's clock: every Add of an
// iteration below it has been applied. Read it before reading values to
// stamp them conservatively.
func (g *Gate) MinClock() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ctrl.MinClock()
}
