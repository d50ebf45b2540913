package kvstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestGateWaitReleasedByAdvance(t *testing.T) {
	g := NewGate(Consistency{Kind: BSP}, 2)
	noErr(t, g.Wait(context.Background(), 0, 0, nil))
	g.Advance(0, 1)
	done := make(chan error, 1)
	go func() { done <- g.Wait(context.Background(), 0, 1, nil) }()
	select {
	case err := <-done:
		t.Fatalf("read at clock 1 proceeded before worker 1 finished iteration 0: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.Advance(1, 1)
	noErr(t, <-done)
	reads, waits, blocked := g.Stats(0)
	equal(t, int64(2), reads)
	equal(t, int64(1), waits)
	check(t, blocked > 0, "blocked time counted")
}

func TestGateWaitContextCancelled(t *testing.T) {
	g := NewGate(Consistency{Kind: BSP}, 2)
	g.Advance(0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := g.Wait(ctx, 0, 1, nil)
	isErr(t, err, context.DeadlineExceeded)
	// The cancelled read is gone: advancing releases nothing and nobody hangs.
	g.Advance(1, 1)
	_, waits, blocked := g.Stats(0)
	equal(t, int64(1), waits)
	// Parked some time after the context started (how long depends on
	// the scheduler: a loaded machine may park it late).
	check(t, blocked > 0, "blocked time of the cancelled read counted, got %v", blocked)
}

func TestGateDefer(t *testing.T) {
	g := NewGate(Consistency{Kind: SSP, Staleness: 1}, 2)
	var got []string
	g.park(0, 1, nil, func(err error) { got = append(got, "now") })
	equal(t, []string{"now"}, got, "allowed reads run synchronously")
	g.Advance(0, 2)
	g.park(0, 2, nil, func(err error) { noErr(t, err); got = append(got, "later") })
	equal(t, 1, len(got))
	g.Advance(1, 1)
	equal(t, []string{"now", "later"}, got)

	var badErr error
	g.park(5, 0, nil, func(err error) { badErr = err })
	isErr(t, badErr, ErrBadWorker)
	isErr(t, g.Wait(context.Background(), -1, 0, nil), ErrBadWorker)
}

func TestGateClose(t *testing.T) {
	g := NewGate(Consistency{Kind: BSP}, 3)
	g.Advance(0, 1)
	boom := errors.New("task failed")
	var deferred error
	g.park(0, 1, nil, func(err error) { deferred = err })
	done := make(chan error, 1)
	go func() { done <- g.Wait(context.Background(), 0, 1, nil) }()
	time.Sleep(10 * time.Millisecond)
	g.Close(boom)
	isErr(t, <-done, boom)
	isErr(t, deferred, boom)
	isErr(t, g.Wait(context.Background(), 1, 0, nil), boom)
	g.Close(nil) // no-op
	g2 := NewGate(Consistency{Kind: ASP}, 1)
	g2.Close(nil)
	isErr(t, g2.Wait(context.Background(), 0, 0, nil), ErrGateClosed)
}

// TestGateBSPWorkers runs goroutine workers through BSP iterations: in
// iteration i every worker adds 1 to a shared counter after its read;
// a read at clock i must see exactly i*workers adds.
func TestGateBSPWorkers(t *testing.T) {
	for _, cons := range []Consistency{{Kind: BSP}, {Kind: SSP, Staleness: 2}, {Kind: SparseSSP, Staleness: 1, Speculation: 1}} {
		t.Run(string(cons.Kind), func(t *testing.T) {
			const workers, iters = 6, 50
			g := NewGate(cons, workers)
			var adds atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			s := int64(cons.Bound())
			for w := range workers {
				wg.Go(func() {
					defer g.Finish(w)
					for c := int64(0); c < iters; c++ {
						if err := g.Wait(context.Background(), w, c, []uint64{uint64(w)}); err != nil {
							errs <- err
							return
						}
						// Reads at clock c see all adds of iterations <= c-s-1
						// (SparseSSP speculates on disjoint keys only, so
						// within s+p).
						bound := s
						if cons.Kind == SparseSSP {
							bound += int64(cons.Speculation)
						}
						if min := (c - bound) * workers; adds.Load() < min {
							errs <- errors.New("read saw a model older than the bound allows")
							return
						}
						adds.Add(1)
						g.Advance(w, c+1)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			equal(t, int64(workers*iters), adds.Load())
		})
	}
}

// A read that may proceed allocates nothing: local stages call Wait on
// every Get.
func TestGateWaitNoAlloc(t *testing.T) {
	g := NewGate(Consistency{Kind: SSP, Staleness: 2}, 2)
	ctx := context.Background()
	a := testing.AllocsPerRun(100, func() {
		if err := g.Wait(ctx, 0, 1, nil); err != nil {
			t.Fatal(err)
		}
	})
	if a != 0 {
		t.Fatalf("Wait allocates %v times per call", a)
	}
}

// TestGateMatchesController drives a Gate from one goroutine with random
// reads (park), Advances (some of them stale) and Finishes, and a bare
// Controller with the same steps: every read must be released exactly
// when the controller releases it, and the gate's MinClock and read
// counts must agree, whether a step took the lock-free path or the lock.
func TestGateMatchesController(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		workers := rapid.IntRange(1, 4).Draw(rt, "workers")
		cons := rapid.SampledFrom([]Consistency{{Kind: ASP}, {Kind: BSP}, {Kind: SSP, Staleness: 1}, {Kind: SSP, Staleness: 3},
			{Kind: SparseSSP, Staleness: 1, Speculation: 1}}).Draw(rt, "consistency")
		g := NewGate(cons, workers)
		ref := NewController(cons, workers, nil)
		var released []uint64 // read numbers the gate released, in order
		clocks := make([]int64, workers)
		var next uint64
		for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			w := rapid.IntRange(0, workers-1).Draw(rt, "worker")
			var want []uint64
			switch rapid.SampledFrom([]string{"read", "read", "advance", "advance", "finish"}).Draw(rt, "op") {
			case "read":
				next++
				id := next
				c := clocks[w] + int64(rapid.IntRange(0, 4).Draw(rt, "ahead"))
				keys := []uint64{uint64(rapid.IntRange(0, 3).Draw(rt, "key"))}
				if ref.Check(w, c, keys) {
					want = []uint64{id}
				} else {
					ref.Park(id, w, c, keys)
				}
				if cons.Kind == SparseSSP {
					want = append(want, ref.Poll()...)
				}
				g.park(w, c, keys, func(err error) {
					if err != nil {
						rt.Fatalf("read %d: %v", id, err)
					}
					released = append(released, id)
				})
			case "advance":
				c := clocks[w] + int64(rapid.IntRange(-1, 2).Draw(rt, "by"))
				clocks[w] = max(clocks[w], c)
				want = ref.Advance(w, c)
				g.Advance(w, c)
			case "finish":
				want = ref.Finish(w)
				g.Finish(w)
			}
			if !slices.Equal(released, want) && !(len(released) == 0 && len(want) == 0) {
				// Released together, in any order: the gate runs the ones a
				// sync released before the step's own.
				a, b := slices.Clone(released), slices.Clone(want)
				slices.Sort(a)
				slices.Sort(b)
				if !slices.Equal(a, b) {
					rt.Fatalf("step %d: gate released %v, controller %v (clocks %v)", step, released, want, ref.Clocks())
				}
			}
			released = released[:0]
			if !rapid.Bool().Draw(rt, "inspect") {
				continue // leave the lock-free state unsynced
			}
			if got, want := g.MinClock(), ref.MinClock(); got != want {
				rt.Fatalf("step %d: MinClock %d, controller %d", step, got, want)
			}
			if len(released) > 0 {
				rt.Fatalf("step %d: MinClock released %v, which the step should have", step, released)
			}
			for v := range workers {
				if reads, _, _ := g.Stats(v); reads != ref.Reads(v) {
					rt.Fatalf("step %d: worker %d: %d reads counted, controller %d", step, v, reads, ref.Reads(v))
				}
				if _, waits, _ := g.Stats(v); waits != ref.Waits(v) {
					rt.Fatalf("step %d: worker %d: %d waits counted, controller %d", step, v, waits, ref.Waits(v))
				}
			}
		}
	})
}

// TestGateSpinBeforePark: a read that may not proceed polls for the
// gate's spin before it parks; one released meanwhile never parks, and
// every kind of wait is counted once in Stats with its time.
func TestGateSpinBeforePark(t *testing.T) {
	cases := []struct {
		name   string
		spin   time.Duration
		act    func(g *Gate) // run 5 ms into the read's wait
		parked bool          // the read parked before it was released
		err    error
	}{
		{name: "released while polling", spin: time.Minute, act: func(g *Gate) { g.Advance(1, 1) }},
		{name: "parked after polling, released later", spin: time.Millisecond, act: func(g *Gate) { g.Advance(1, 1) }, parked: true},
		{name: "closed while polling", spin: time.Minute, act: func(g *Gate) { g.Close(nil) }, err: ErrGateClosed},
		{name: "other worker finished while polling", spin: time.Minute, act: func(g *Gate) { g.Finish(1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewGate(Consistency{Kind: BSP}, 2)
			g.SpinBeforePark(tc.spin)
			g.Advance(0, 1)
			// The act runs 5 ms after the read is about to wait (not
			// after this goroutine starts: on a loaded machine the
			// read could begin late and wait less).
			ready, acted := make(chan struct{}), make(chan time.Time, 1)
			go func() {
				<-ready
				time.Sleep(5 * time.Millisecond)
				acted <- time.Now()
				tc.act(g)
			}()
			start := time.Now()
			close(ready)
			err := g.Wait(context.Background(), 0, 1, nil)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Wait: %v, want %v", err, tc.err)
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Fatalf("Wait took %v: it polled past the release", took)
			}
			if tc.err != nil {
				return
			}
			g.mu.Lock()
			parked := g.ctrl.Waits(0) > 0
			g.mu.Unlock()
			equal(t, tc.parked, parked)
			reads, waits, blocked := g.Stats(0)
			equal(t, int64(1), reads)
			equal(t, int64(1), waits)
			// Blocked from the wait's start to the release (at least 5
			// ms), give or take the scheduling between them: not counted,
			// the polling would show as next to nothing.
			waited := (<-acted).Sub(start)
			check(t, blocked >= waited/2, "the time polled and parked counted as blocked: %v of the %v before the release", blocked, waited)
		})
	}
}
