package kvstore

import (
	"math"
	"slices"
	"time"
)

// Controller decides when a worker's read may proceed under a stage's
// consistency model. It is a deterministic state machine: no goroutines,
// no locks, time only through the injected now. Gate wraps it for
// concurrent use.
//
// A worker's clock counts the iterations it has finished (0 at start,
// i+1 after iteration i). A read issued at clock c may proceed iff
// minClock >= c - s, s = Consistency.Bound(); ASP never waits. Finished
// workers hold nobody back; once all finished everything proceeds.
//
// SparseSSP(s, p): a read at clock c with c - s - p <= minClock < c - s
// may still proceed iff its keys intersect the current-iteration keys of
// none of the slowest workers (those at minClock). The controller learns a
// worker's current-iteration keys from the reads it issues at that clock
// (Check, Park, RecordKeys); a slowest worker that has issued no read at
// its clock yet has unknown keys, and the read waits. Reads parked on that
// are re-examined by Poll (and by every Advance and Finish).
type Controller struct {
	cons    Consistency
	bound   int64 // -1: unbounded (ASP)
	spec    int64 // speculation (SparseSSP only)
	sparse  bool
	now     func() time.Time
	clocks  []int64
	done    []bool
	live    int   // workers not finished
	min     int64 // cached min clock over live workers
	keys    []keySet
	parked  []parkedRead
	reads   []int64
	waits   []int64
	blocked []time.Duration
}

// keySet holds the keys a worker read in its iteration at clock.
type keySet struct {
	clock int64
	set   map[uint64]struct{}
}

type parkedRead struct {
	id     uint64
	worker int
	clock  int64
	keys   []uint64 // copied, SparseSSP only
	since  time.Time
}

// NewController returns a controller for workers workers, all at clock 0.
// now defaults to time.Now.
func NewController(c Consistency, workers int, now func() time.Time) *Controller {
	if now == nil {
		now = time.Now
	}
	workers = max(workers, 0)
	ct := &Controller{
		cons:    c,
		bound:   int64(c.Bound()),
		sparse:  c.Kind == SparseSSP,
		now:     now,
		clocks:  make([]int64, workers),
		done:    make([]bool, workers),
		live:    workers,
		reads:   make([]int64, workers),
		waits:   make([]int64, workers),
		blocked: make([]time.Duration, workers),
	}
	if c.Kind == ASP {
		ct.bound = -1
	}
	if ct.sparse {
		ct.spec = int64(max(c.Speculation, 0))
		ct.keys = make([]keySet, workers)
		for i := range ct.keys {
			ct.keys[i] = keySet{clock: -1, set: make(map[uint64]struct{})}
		}
	}
	if workers == 0 {
		ct.min = math.MaxInt64
	}
	return ct
}

func (c *Controller) valid(w int) bool { return w >= 0 && w < len(c.clocks) }

// RecordKeys notes that worker read keys in its iteration at clock. Only
// SparseSSP keeps them; keys of an older iteration are dropped.
func (c *Controller) RecordKeys(worker int, clock int64, keys []uint64) {
	if !c.sparse || !c.valid(worker) {
		return
	}
	ks := &c.keys[worker]
	if clock < ks.clock {
		return
	}
	if clock > ks.clock {
		clear(ks.set)
		ks.clock = clock
	}
	for _, k := range keys {
		ks.set[k] = struct{}{}
	}
}

// Check reports whether worker's read of keys at clock may proceed now,
// counts the read and records its keys (SparseSSP). An invalid worker
// index is never allowed.
func (c *Controller) Check(worker int, clock int64, keys []uint64) bool {
	if !c.valid(worker) {
		return false
	}
	c.reads[worker]++
	c.RecordKeys(worker, clock, keys)
	return c.allowed(worker, clock, keys)
}

// allowed is the rule, without side effects.
func (c *Controller) allowed(worker int, clock int64, keys []uint64) bool {
	if c.bound < 0 || c.live == 0 {
		return true
	}
	ahead := clock - c.min // may be negative
	if ahead <= c.bound {
		return true
	}
	if !c.sparse || ahead > c.bound+c.spec {
		return false
	}
	for v, cl := range c.clocks {
		if cl != c.min || c.done[v] || v == worker {
			continue
		}
		ks := &c.keys[v]
		if ks.clock != cl {
			return false // its current keys are unknown
		}
		for _, k := range keys {
			if _, hit := ks.set[k]; hit {
				return false
			}
		}
	}
	return true
}

// Park holds a read that may not proceed yet under id (unique among parked
// reads), starting its blocked-time accounting. It also records the keys.
func (c *Controller) Park(id uint64, worker int, clock int64, keys []uint64) {
	if !c.valid(worker) {
		return
	}
	c.waits[worker]++
	c.RecordKeys(worker, clock, keys)
	p := parkedRead{id: id, worker: worker, clock: clock, since: c.now()}
	if c.sparse {
		p.keys = slices.Clone(keys)
	}
	c.parked = append(c.parked, p)
}

// Advance moves worker to clock (lower or equal values are ignored) and
// returns the ids of parked reads now allowed, in park order.
func (c *Controller) Advance(worker int, clock int64) (ready []uint64) {
	if !c.valid(worker) || c.done[worker] || clock <= c.clocks[worker] {
		return nil
	}
	old := c.clocks[worker]
	c.clocks[worker] = clock
	if old == c.min {
		c.recomputeMin()
	}
	return c.Poll()
}

// Finish marks worker done: its clock no longer holds anyone back.
func (c *Controller) Finish(worker int) (ready []uint64) {
	if !c.valid(worker) || c.done[worker] {
		return nil
	}
	c.done[worker] = true
	c.live--
	c.recomputeMin()
	return c.Poll()
}

func (c *Controller) recomputeMin() {
	m := int64(math.MaxInt64)
	for v, cl := range c.clocks {
		if !c.done[v] && cl < m {
			m = cl
		}
	}
	c.min = m
}

// Poll re-examines the parked reads and returns the ids of those now
// allowed, in park order. Advance and Finish call it; call it after a
// Check or Park under SparseSSP, since a slowest worker's first read of an
// iteration may release reads that waited for its keys.
func (c *Controller) Poll() (ready []uint64) {
	if len(c.parked) == 0 {
		return nil
	}
	var now time.Time
	kept := c.parked[:0]
	for _, p := range c.parked {
		if !c.allowed(p.worker, p.clock, p.keys) {
			kept = append(kept, p)
			continue
		}
		if now.IsZero() {
			now = c.now()
		}
		c.blocked[p.worker] += now.Sub(p.since)
		ready = append(ready, p.id)
	}
	clear(c.parked[len(kept):])
	c.parked = kept
	return ready
}

// Cancel drops a parked read (its waiter gave up), counting its blocked
// time so far.
func (c *Controller) Cancel(id uint64) {
	for i, p := range c.parked {
		if p.id == id {
			c.blocked[p.worker] += c.now().Sub(p.since)
			c.parked = slices.Delete(c.parked, i, i+1)
			return
		}
	}
}

// MinClock is the smallest clock of the unfinished workers, math.MaxInt64
// once all finished.
func (c *Controller) MinClock() int64 { return c.min }

// Clocks returns a copy of every worker's clock.
func (c *Controller) Clocks() []int64 { return slices.Clone(c.clocks) }

// Parked is how many reads are parked.
func (c *Controller) Parked() int { return len(c.parked) }

// BlockedTime is the total time worker's reads spent parked (released or
// cancelled ones).
func (c *Controller) BlockedTime(worker int) time.Duration {
	if !c.valid(worker) {
		return 0
	}
	return c.blocked[worker]
}

// Waits is how many of worker's reads had to park.
func (c *Controller) Waits(worker int) int64 {
	if !c.valid(worker) {
		return 0
	}
	return c.waits[worker]
}

// Reads is how many reads worker issued (Check calls).
func (c *Controller) Reads(worker int) int64 {
	if !c.valid(worker) {
		return 0
	}
	return c.reads[worker]
}
