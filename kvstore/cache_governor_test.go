package kvstore

import (
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// driveGovernor drives g over reads of n keys whose iterations cost cost(cached)
// ns per key, returning which reads went through the cache.
func driveGovernor(g *cacheGovernor, reads, n int, cost func(cached bool) float64) []bool {
	now := time.Unix(0, 0)
	ways := make([]bool, reads)
	for i := range ways {
		cached, _ := g.next(now, n)
		ways[i] = cached
		now = now.Add(time.Duration(cost(cached) * float64(n)))
	}
	return ways
}

// The governor settles on the cheaper way, through noise, and keeps
// measuring the other one now and then.
func TestCacheGovernorPicksTheCheaperWay(t *testing.T) {
	for _, tc := range []struct {
		name           string
		cache, direct  float64 // ns per key
		noise          float64 // relative, uniform
		wantCachedFrac float64 // at least (or, when negative, at most -x)
	}{
		{"cache cheaper", 80, 100, 0.1, 0.9},
		{"cache much cheaper", 20, 100, 0.3, 0.9},
		{"table cheaper", 120, 100, 0.1, -0.1},
		{"table much cheaper", 300, 100, 0.3, -0.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			g := newCacheGovernor(cacheWindow, maxCacheRun)
			ways := driveGovernor(&g, 40000, 1000, func(cached bool) float64 {
				c := tc.direct
				if cached {
					c = tc.cache
				}
				return c * (1 + tc.noise*(2*rng.Float64()-1))
			})
			late := ways[len(ways)/2:]
			n := 0
			for _, c := range late {
				if c {
					n++
				}
			}
			frac := float64(n) / float64(len(late))
			if tc.wantCachedFrac >= 0 && frac < tc.wantCachedFrac || tc.wantCachedFrac < 0 && frac > -tc.wantCachedFrac {
				t.Fatalf("%.3f of the later reads went through the cache, want %v", frac, tc.wantCachedFrac)
			}
			if n == 0 || n == len(late) {
				t.Fatalf("the later reads all went one way (%d of %d cached): the other is never measured again", n, len(late))
			}
		})
	}
}

// Whatever the iteration times: the cache is invalidated exactly when a
// read goes through it after reads that did not; no stretch of reads one
// way is longer than a stretch of the winner plus a measurement; a
// governor without a window always uses the cache.
func TestCacheGovernorProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		window := rapid.IntRange(0, 6).Draw(rt, "window")
		maxRun := rapid.IntRange(0, 20).Draw(rt, "max run")
		g := newCacheGovernor(window, maxRun)
		now := time.Unix(0, 0)
		prev, stretch := true, 0
		for i := range rapid.IntRange(1, 400).Draw(rt, "reads") {
			n := rapid.IntRange(0, 3).Draw(rt, "keys")
			cached, invalidate := g.next(now, n)
			if window == 0 && (!cached || invalidate) {
				rt.Fatalf("read %d: no window, but cached %v, invalidate %v", i, cached, invalidate)
			}
			if invalidate != (cached && !prev) {
				rt.Fatalf("read %d: cached %v after %v, invalidate %v", i, cached, prev, invalidate)
			}
			if cached == prev {
				stretch++
			} else {
				stretch = 1
			}
			if window > 0 && stretch > max(maxRun, window)+window {
				rt.Fatalf("read %d: %d reads in a row cached=%v (window %d, max run %d)", i, stretch, cached, window, maxRun)
			}
			prev = cached
			// Time may stand still or go back (a clock step): such
			// iterations are not counted, and nothing breaks.
			now = now.Add(time.Duration(rapid.IntRange(-10, 1000).Draw(rt, "ns")))
		}
	})
}

// The governor's bookkeeping allocates nothing per read.
func TestCacheGovernorAllocatesNothing(t *testing.T) {
	g := newCacheGovernor(cacheWindow, maxCacheRun)
	now := time.Unix(0, 0)
	allocs := testing.AllocsPerRun(5000, func() {
		g.next(now, 10)
		now = now.Add(time.Microsecond)
	})
	equal(t, 0.0, allocs, "allocations per read")
}
