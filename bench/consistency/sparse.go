package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/flexps/flexps/kvstore"
)

// sparseResult is one simulated run of the consistency controller.
type sparseResult struct {
	Section     string  `json:"section"` // sparse
	Consistency string  `json:"consistency"`
	Sparsity    float64 `json:"sparsity"` // m / n
	N           int     `json:"n"`
	M           int     `json:"m"`
	Workers     int     `json:"workers"`
	Reads       int64   `json:"reads"`         // iterations (one read each)
	Parked      int64   `json:"parked"`        // reads that had to wait
	SpecReads   int64   `json:"spec_reads"`    // reads ahead of the slowest by s+1..s+p
	SpecParked  int64   `json:"spec_parked"`   // of those, parked (a key conflict)
	Predicted   float64 `json:"predicted"`     // expected conflict probability of a speculative read
	Ticks       int64   `json:"ticks"`         // simulated time until every fast worker finished
	FastPerTick float64 `json:"fast_per_tick"` // a fast worker's iterations per tick
}

// lnChoose is ln C(n, k).
func lnChoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n) + 1)
	b, _ := math.Lgamma(float64(k) + 1)
	c, _ := math.Lgamma(float64(n-k) + 1)
	return a - b - c
}

// noConflict is C(n-m, m)/C(n, m): the probability that two independent
// uniform m-subsets of n keys are disjoint.
func noConflict(n, m int) float64 {
	if 2*m > n {
		return 0
	}
	return math.Exp(lnChoose(n-m, m) - lnChoose(n, m))
}

func sparseAll(o options) []sparseResult {
	var out []sparseResult
	for _, sp := range o.sparsities {
		m := max(int(math.Round(sp*float64(o.sparseN))), 1)
		for _, c := range []kvstore.Consistency{
			{Kind: kvstore.SSP, Staleness: 2},
			{Kind: kvstore.SparseSSP, Staleness: 2, Speculation: 2},
		} {
			out = append(out, simulate(c, o.sparseN, m, o.sparseWorkers, o.sparseIters, o.sparseSlow, 1))
		}
	}
	return out
}

// simulate drives a Controller with workers simulated workers in discrete
// ticks. Worker 0 is slow (slow ticks per iteration), the others take one
// tick. At the start of an iteration a worker draws m distinct uniform keys
// of n and reads them (Check); a read that may not proceed is parked
// (Park) and the worker stalls until Advance, Finish or Poll releases it.
// A fast worker more than s+p ahead of the slowest waits before reading
// (no key set can let it through), which counts as a wait too.
// When an iteration's time is up the worker advances its clock. The slow
// worker acts first in every tick, so its current keys are known before a
// fast worker's read is examined. It runs until every fast worker did
// iters iterations; the slow worker is then finished.
func simulate(c kvstore.Consistency, n, m, workers, iters, slow int, seed uint64) sparseResult {
	workers = max(workers, 2)
	rng := rand.New(rand.NewPCG(seed, uint64(m)))
	var tick int64
	ctl := kvstore.NewController(c, workers, func() time.Time { return time.Unix(0, tick) })
	res := sparseResult{Section: "sparse", Consistency: consName(c), Sparsity: float64(m) / float64(n), N: n, M: m, Workers: workers}
	q := noConflict(n, m)
	bound, spec := int64(c.Bound()), int64(c.Speculation)

	type wstate struct {
		clock    int64
		left     int // ticks left in the current iteration; 0: about to read
		parked   bool
		waited   bool // this iteration already counted as waiting
		done     int
		finished bool
	}
	ws := make([]wstate, workers)
	dur := func(w int) int {
		if w == 0 {
			return slow
		}
		return 1
	}
	seen := make(map[uint64]struct{}, m)
	keys := make([]uint64, 0, m)
	draw := func() []uint64 {
		clear(seen)
		keys = keys[:0]
		for len(keys) < m {
			k := rng.Uint64N(uint64(n))
			if _, dup := seen[k]; !dup {
				seen[k] = struct{}{}
				keys = append(keys, k)
			}
		}
		return keys
	}
	release := func(ids []uint64) {
		for _, id := range ids {
			ws[id].parked = false
			ws[id].left = dur(int(id))
		}
	}
	fastLeft := workers - 1
	for fastLeft > 0 {
		tick++
		for w := range ws {
			s := &ws[w]
			if s.finished || s.parked {
				continue
			}
			if s.left > 0 {
				s.left--
				if s.left > 0 {
					continue
				}
				s.clock++
				s.done++
				release(ctl.Advance(w, s.clock))
				if w != 0 && s.done == iters {
					s.finished = true
					fastLeft--
					release(ctl.Finish(w))
					continue
				}
			}
			// Beyond s+p a read waits whatever its keys; the simulated
			// worker holds it back until the slowest catches up, so every
			// read reaches the Controller once, inside the bound or inside
			// the speculation window, and each speculative read is
			// examined exactly once with the slowest worker's keys known.
			ahead := s.clock - ctl.MinClock()
			if w != 0 && bound >= 0 && ahead > bound+spec {
				if !s.waited {
					s.waited = true
					res.Parked++
				}
				continue
			}
			ks := draw()
			isSpec := w != 0 && bound >= 0 && ahead > bound && ahead <= bound+spec
			if isSpec {
				// Expected conflict: its keys against each other worker
				// at the minimum clock.
				others := 0
				for v, cl := range ctl.Clocks() {
					if v != w && cl == ctl.MinClock() && !ws[v].finished {
						others++
					}
				}
				res.SpecReads++
				res.Predicted += 1 - math.Pow(q, float64(others))
			}
			res.Reads++
			if ctl.Check(w, s.clock, ks) {
				s.left = dur(w)
				s.waited = false
			} else {
				if !s.waited {
					res.Parked++
				}
				s.waited = false
				if isSpec {
					res.SpecParked++
				}
				s.parked = true
				ctl.Park(uint64(w), w, s.clock, ks)
			}
			release(ctl.Poll())
		}
	}
	ctl.Finish(0)
	res.Ticks = tick
	res.FastPerTick = float64(iters) / float64(tick)
	if res.SpecReads > 0 {
		res.Predicted /= float64(res.SpecReads)
	}
	return res
}

func reportSparse(o options, rs []sparseResult) {
	fmt.Println()
	fmt.Printf("## sparse: the SparseSSP Controller driven directly: %d simulated workers, worker 0 takes %d ticks per iteration, the others 1;\n",
		max(o.sparseWorkers, 2), o.sparseSlow)
	fmt.Printf("## each iteration reads m uniform distinct keys of n = %d; %d iterations per fast worker\n", o.sparseN, o.sparseIters)
	fmt.Printf("%-9s %6s %-17s %10s %9s %11s %11s %10s %10s %9s\n", "sparsity", "m", "consistency", "reads", "waited", "spec reads", "spec waited", "predicted", "fast it/tick", "vs ssp")
	var ssp float64
	for _, r := range rs {
		specRate := "-"
		if r.SpecReads > 0 {
			specRate = fmt.Sprintf("%.5f", float64(r.SpecParked)/float64(r.SpecReads))
		}
		pred := "-"
		if r.SpecReads > 0 {
			pred = fmt.Sprintf("%.5f", r.Predicted)
		}
		rel := "-"
		if r.Consistency == "ssp(2)" {
			ssp = r.FastPerTick
		} else if ssp > 0 {
			rel = fmt.Sprintf("x%.2f", r.FastPerTick/ssp)
		}
		fmt.Printf("%-9.0e %6d %-17s %10d %9.4f %11d %11s %10s %10.3f %9s\n", r.Sparsity, r.M, r.Consistency, r.Reads,
			float64(r.Parked)/float64(r.Reads), r.SpecReads, specRate, pred, r.FastPerTick, rel)
	}
	fmt.Println("waited = iterations whose read waited (held beyond s+p, or parked by the Controller) / iterations;")
	fmt.Println("spec reads = reads ahead of the slowest by s+1..s+p,")
	fmt.Println("the only ones SparseSSP treats differently from SSP; spec waited = their parked fraction (a key conflict),")
	fmt.Println("beside predicted = 1 - C(n-m,m)/C(n,m) per slowest worker they are checked against (math.Lgamma).")
	fmt.Println("A steadily slower worker holds everyone to its pace under any bounded staleness: SparseSSP removes waits, not the bound.")
}
