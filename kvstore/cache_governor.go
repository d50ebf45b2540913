package kvstore

import (
	"slices"
	"time"
)

// A process cache pays only when its hits save more than its lookups
// cost. A hit saves a key's share of a read (its encoding, the shard's
// lookup, the answer's value), and the whole message to a shard only when
// every key of the read that the shard holds is fresh in the cache; every
// read through the cache costs a lookup per key and a copy of the keys
// and values. On a training loop over skewed keys each mini-batch has
// cold keys on every shard, so the messages go anyway, and under SSP a
// worker at the staleness bound must fetch every key the other workers
// write again each iteration: there the cache costs more than it saves
// (README, Benchmarks, the *Ninth pass*). How much a hit saves depends on
// the wire (in memory, TCP, NATS) and the machine, so it is measured, not
// assumed.
//
// cacheGovernor decides, read by read, whether reads and writes go
// through the cache or straight to the table. It measures both: a window
// of reads through the cache, then a window straight to the table, each
// read's cost being the time from its start to the start of the worker's
// next read (an iteration: the read, the compute, the write; what the
// cache changes is in it) per key read. The cheaper median wins and runs
// for a stretch of reads; the stretch doubles while the same way keeps
// winning, up to maxCacheRun, and starts over from the window when the
// other one wins. Then both are measured again. It is an I/O-free state
// machine: the CachedTable asks it before each read and passes the time.

const (
	// cacheWindow is how many reads one measurement of one way spans.
	cacheWindow = 32
	// maxCacheRun bounds a stretch of the winning way, in reads.
	maxCacheRun = 2048
)

// govPhase is what the governor is doing.
type govPhase uint8

const (
	govMeasureCache  govPhase = iota // timing reads through the cache
	govMeasureDirect                 // timing reads straight to the table
	govRun                           // running the winner
)

type cacheGovernor struct {
	window int // reads per measurement; 0: always use the cache
	maxRun int

	phase  govPhase
	left   int  // reads of the phase not yet issued
	cached bool // the way of the current read
	run    int  // length of the next stretch of the winner
	last   int  // the last winner: 1 the cache, -1 the table, 0 none yet

	// The read in progress: when it started and how many keys it read
	// (0: no read yet, or none to count).
	start time.Time
	keys  int

	costs     []float64 // ns per key of the phase's reads so far
	cacheCost float64   // median of the last cache window
}

func newCacheGovernor(window, maxRun int) cacheGovernor {
	g := cacheGovernor{window: window, maxRun: max(maxRun, window), run: window, costs: make([]float64, 0, max(window, 0))}
	g.enter(govMeasureCache)
	return g
}

func (g *cacheGovernor) enter(p govPhase) {
	g.phase, g.left = p, g.window
	g.costs = g.costs[:0]
	switch p {
	case govMeasureCache:
		g.cached = true
	case govMeasureDirect:
		g.cached = false
	case govRun:
		g.left = g.run
	}
}

// next is called at the start of each read of n keys at time now. It
// accounts the previous read's iteration and reports whether this read
// goes through the cache, and whether the cache must drop its values
// first (invalidate: the reads and writes that went straight to the
// table since it was last used did not reach it).
func (g *cacheGovernor) next(now time.Time, n int) (cached, invalidate bool) {
	if g.window <= 0 {
		return true, false
	}
	was := g.cached
	if g.keys > 0 && g.phase != govRun {
		if d := now.Sub(g.start); d >= 0 {
			g.costs = append(g.costs, float64(d.Nanoseconds())/float64(g.keys))
		}
	}
	if g.left <= 0 {
		g.advance()
	}
	g.left--
	g.start, g.keys = now, n
	return g.cached, g.cached && !was
}

// advance ends the current phase: its reads were all issued, and the
// iterations of a measurement all timed.
func (g *cacheGovernor) advance() {
	switch g.phase {
	case govMeasureCache:
		g.cacheCost = median(g.costs)
		g.enter(govMeasureDirect)
	case govMeasureDirect:
		win := 1
		if direct := median(g.costs); len(g.costs) > 0 && direct < g.cacheCost {
			win = -1
		}
		if win == g.last {
			g.run = min(2*g.run, g.maxRun)
		} else {
			g.run = g.window
		}
		g.last = win
		g.enter(govRun)
		g.cached = win > 0
	case govRun:
		g.enter(govMeasureCache)
	}
}

// median of xs (0 when empty); sorts xs.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}
