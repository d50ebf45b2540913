package kvstore

import (
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// fakeClock is an injected clock stepped by hand.
type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time       { return f.t }
func (f *fakeClock) step(d time.Duration) { f.t = f.t.Add(d) }
func newFakeClock() *fakeClock            { return &fakeClock{t: time.Unix(1000, 0)} }
func ids(v ...uint64) []uint64            { return v }
func noneReady(t *testing.T, ready []uint64) {
	t.Helper()
	check(t, len(ready) == 0, "released %v", ready)
}

// TestBSPBarrier walks three workers through two BSP iterations: nobody
// reads iteration i+1 until everybody finished iteration i.
func TestBSPBarrier(t *testing.T) {
	fc := newFakeClock()
	c := NewController(Consistency{Kind: BSP}, 3, fc.now)

	// Iteration 0: everyone at clock 0 reads freely.
	for w := range 3 {
		check(t, c.Check(w, 0, nil), "worker %d reads at clock 0", w)
	}
	// Worker 0 finishes iteration 0 first and wants to read at clock 1:
	// it must wait for 1 and 2.
	noneReady(t, c.Advance(0, 1))
	check(t, !c.Check(0, 1, nil))
	c.Park(10, 0, 1, nil)
	// Worker 1 finishes; 0 still waits for 2, and 1 now waits too.
	fc.step(time.Second)
	noneReady(t, c.Advance(1, 1))
	check(t, !c.Check(1, 1, nil))
	c.Park(11, 1, 1, nil)
	// Worker 2 finishing releases both, in park order.
	fc.step(time.Second)
	equal(t, ids(10, 11), c.Advance(2, 1))
	check(t, c.Check(2, 1, nil), "the last worker reads at once")
	equal(t, int64(1), c.MinClock())
	equal(t, []int64{1, 1, 1}, c.Clocks())
	equal(t, 2*time.Second, c.BlockedTime(0))
	equal(t, time.Second, c.BlockedTime(1))
	equal(t, time.Duration(0), c.BlockedTime(2))
	equal(t, int64(1), c.Waits(0))
	equal(t, int64(0), c.Waits(2))
	equal(t, int64(2), c.Reads(0))

	// Iteration 1: worker 2 is now first, 0 last.
	noneReady(t, c.Advance(2, 2))
	check(t, !c.Check(2, 2, nil))
	c.Park(12, 2, 2, nil)
	noneReady(t, c.Advance(1, 2))
	// Lower or repeated clocks are ignored.
	noneReady(t, c.Advance(0, 1))
	noneReady(t, c.Advance(0, 0))
	equal(t, ids(12), c.Advance(0, 2))

	// A finished worker no longer holds anyone back.
	noneReady(t, c.Advance(0, 3))
	check(t, !c.Check(0, 3, nil))
	c.Park(13, 0, 3, nil)
	noneReady(t, c.Finish(1))
	equal(t, ids(13), c.Finish(2))
	equal(t, int64(3), c.MinClock())
	c.Finish(0)
	equal(t, int64(math.MaxInt64), c.MinClock())
	check(t, c.Check(0, 100, nil), "all finished: everything proceeds")
}

func TestSSPAndASP(t *testing.T) {
	c := NewController(Consistency{Kind: SSP, Staleness: 2}, 2, nil)
	c.Advance(0, 4) // worker 0 runs ahead of worker 1 (clock 0)
	check(t, c.Check(0, 2, nil), "2 ahead is within staleness 2")
	check(t, !c.Check(0, 3, nil), "3 ahead is not")
	c.Park(1, 0, 3, nil)
	c.Park(2, 0, 4, nil)
	equal(t, ids(1), c.Advance(1, 1))
	equal(t, ids(2), c.Advance(1, 2))
	c.Park(3, 0, 9, nil)
	c.Cancel(3)
	noneReady(t, c.Advance(1, 100))

	a := NewController(Consistency{Kind: ASP, Staleness: 1}, 2, nil)
	check(t, a.Check(0, 1000, nil), "ASP never waits")

	// Invalid workers are never allowed and change nothing.
	check(t, !c.Check(-1, 0, nil))
	check(t, !c.Check(2, 0, nil))
	noneReady(t, c.Advance(5, 1))
	equal(t, int64(0), c.Reads(9))
}

func TestSparseSSP(t *testing.T) {
	c := NewController(Consistency{Kind: SparseSSP, Staleness: 1, Speculation: 2}, 3, nil)
	// Worker 0 is slowest at clock 0; 1 and 2 race ahead.
	c.Advance(1, 3)
	c.Advance(2, 1)
	// Worker 1 at clock 3 is 3 ahead (> s=1, <= s+p=3): worker 0's keys
	// are unknown, so it waits.
	check(t, !c.Check(1, 3, []uint64{5}))
	c.Park(1, 1, 3, []uint64{5})
	// Worker 0 reads keys {1,2} at clock 0: worker 1's {5} is disjoint.
	check(t, c.Check(0, 0, []uint64{1, 2}))
	equal(t, ids(1), c.Poll())
	// Intersecting keys wait; too far ahead waits regardless.
	check(t, !c.Check(1, 3, []uint64{2, 9}))
	c.Park(2, 1, 3, []uint64{2, 9})
	check(t, !c.Check(1, 4, []uint64{7}))
	// Worker 0 moves to clock 1: its keys are unknown again.
	noneReady(t, c.Advance(0, 1))
	// Now the slowest are 0 and 2 (clock 1); 2's keys at clock 1 unknown.
	check(t, !c.Check(1, 3, []uint64{7}))
	check(t, c.Check(2, 1, []uint64{7}), "2 is a slowest worker")
	check(t, c.Check(0, 1, []uint64{8}))
	check(t, !c.Check(1, 3, []uint64{7}), "intersects 2's keys")
	check(t, c.Check(1, 3, []uint64{2}), "disjoint from both slowest workers")
	equal(t, ids(2), c.Poll(), "{2,9} is disjoint from {8} and {7}")
}

// simWorker is a worker in the randomized model.
type simWorker struct {
	clock    int64
	state    int // idle: must read; ready: read allowed, will advance; parked
	keys     []uint64
	finished bool
}

const (
	idle = iota
	ready
	parked
)

// TestControllerProperties drives a Controller with random interleavings
// of 2..8 workers and checks, at every allowed read: (a) the staleness
// bound (and for SparseSSP beyond s: no intersection with any slowest
// worker's current keys); (b) no deadlock: a slowest unfinished worker
// can always read; (c) the shadow model: a read at clock c within the
// bound has seen every update tagged <= c-s-1, i.e. all clocks >= c-s.
func TestControllerProperties(t *testing.T) {
	kinds := []ConsistencyKind{BSP, SSP, ASP, SparseSSP}
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) { runControllerModel(rt, kind) })
		})
	}
}

func runControllerModel(rt *rapid.T, kind ConsistencyKind) {
	n := rapid.IntRange(2, 8).Draw(rt, "workers")
	cons := Consistency{Kind: kind}
	if kind == SSP || kind == SparseSSP {
		cons.Staleness = rapid.IntRange(0, 3).Draw(rt, "s")
	}
	if kind == SparseSSP {
		cons.Speculation = rapid.IntRange(0, 3).Draw(rt, "p")
	}
	iters := rapid.Int64Range(1, 8).Draw(rt, "iterations")
	fc := newFakeClock()
	c := NewController(cons, n, fc.now)
	ws := make([]simWorker, n)
	s := int64(cons.Bound())
	p := int64(cons.Speculation)
	// The keys every worker read in each iteration it finished or is in.
	history := make([]map[int64][]uint64, n)
	for i := range history {
		history[i] = map[int64][]uint64{}
	}
	var nextID uint64
	byID := map[uint64]int{}

	minClock := func() int64 {
		m := int64(math.MaxInt64)
		for _, w := range ws {
			if !w.finished && w.clock < m {
				m = w.clock
			}
		}
		return m
	}
	// allowedRead checks (a) and (c) for worker w's read being allowed now.
	allowedRead := func(w int, when string) {
		clk, keys := ws[w].clock, ws[w].keys
		m := minClock()
		if m != c.MinClock() {
			rt.Fatalf("MinClock %d, model %d", c.MinClock(), m)
		}
		if s < 0 || m == math.MaxInt64 {
			return
		}
		ahead := clk - m
		if ahead <= s {
			// (c) shadow: every update tagged <= clk-s-1 is in.
			for v := range ws {
				if !ws[v].finished && ws[v].clock < clk-s {
					rt.Fatalf("%s: worker %d read at %d before worker %d finished iteration %d", when, w, clk, v, clk-s-1)
				}
			}
			return
		}
		if kind != SparseSSP || ahead > s+p {
			rt.Fatalf("%s: worker %d read at clock %d, min %d, bound %d", when, w, clk, m, s)
		}
		for v := range ws {
			if v == w || ws[v].finished || ws[v].clock != m {
				continue
			}
			cur, known := history[v][m]
			if !known {
				rt.Fatalf("%s: speculative read while slowest worker %d's keys unknown", when, v)
			}
			for _, k := range keys {
				for _, k2 := range cur {
					if k == k2 {
						rt.Fatalf("%s: speculative read of key %d held by slowest worker %d", when, k, v)
					}
				}
			}
		}
	}
	release := func(rs []uint64, when string) {
		for _, id := range rs {
			w := byID[id]
			delete(byID, id)
			if ws[w].state != parked {
				rt.Fatalf("%s released id %d of worker %d not parked", when, id, w)
			}
			ws[w].state = ready
			allowedRead(w, when)
		}
	}

	for step := 0; ; step++ {
		var runnable []int
		done := true
		for w := range ws {
			if !ws[w].finished {
				done = false
				if ws[w].state != parked {
					runnable = append(runnable, w)
				}
			}
		}
		if done {
			break
		}
		// (b) no deadlock: someone can run, and every slowest worker may read.
		if len(runnable) == 0 {
			rt.Fatalf("deadlock at step %d: clocks %v", step, c.Clocks())
		}
		m := minClock()
		for w := range ws {
			if !ws[w].finished && ws[w].clock == m && !c.allowed(w, m, []uint64{0, 1, 2, 3, 4, 5}) {
				rt.Fatalf("slowest worker %d at %d may not read", w, m)
			}
		}
		if step > 10000 {
			rt.Fatalf("no progress")
		}
		w := rapid.SampledFrom(runnable).Draw(rt, "worker")
		fc.step(time.Millisecond)
		switch ws[w].state {
		case idle:
			keys := rapid.SliceOfNDistinct(rapid.Uint64Range(0, 5), 0, 3, rapid.ID).Draw(rt, "keys")
			ws[w].keys = keys
			history[w][ws[w].clock] = append(history[w][ws[w].clock], keys...)
			if c.Check(w, ws[w].clock, keys) {
				ws[w].state = ready
				allowedRead(w, "check")
			} else {
				nextID++
				byID[nextID] = w
				ws[w].state = parked
				c.Park(nextID, w, ws[w].clock, keys)
			}
			if kind == SparseSSP {
				release(c.Poll(), "poll")
			}
		case ready:
			ws[w].clock++
			ws[w].state = idle
			release(c.Advance(w, ws[w].clock), "advance")
			if ws[w].clock == iters {
				ws[w].finished = true
				release(c.Finish(w), "finish")
			}
		}
	}
	if c.Parked() != 0 {
		rt.Fatalf("%d reads still parked after all finished", c.Parked())
	}
	var waits int64
	for w := range ws {
		waits += c.Waits(w)
	}
	if kind == ASP && waits != 0 {
		rt.Fatalf("ASP waited")
	}
}

func BenchmarkControllerCheck(b *testing.B) {
	for _, kind := range []ConsistencyKind{SSP, SparseSSP} {
		b.Run(string(kind), func(b *testing.B) {
			c := NewController(Consistency{Kind: kind, Staleness: 1, Speculation: 2}, 8, nil)
			keys := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
			for w := range 8 {
				c.Check(w, 0, keys)
			}
			for w := 1; w < 8; w++ {
				c.Advance(w, 2)
			}
			b.ReportAllocs()
			for b.Loop() {
				c.Check(3, 2, []uint64{100, 101, 102})
			}
		})
	}
}

func ExampleController() {
	c := NewController(Consistency{Kind: BSP}, 2, nil)
	c.Advance(0, 1)
	fmt.Println(c.Check(0, 1, nil)) // worker 1 has not finished iteration 0
	c.Park(7, 0, 1, nil)
	fmt.Println(c.Advance(1, 1))
	// Output:
	// false
	// [7]
}
