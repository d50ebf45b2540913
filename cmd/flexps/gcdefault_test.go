package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestGCLimit(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		live, nonHeap uint64
		want          int64
	}{
		{0, 0, gcMinHeadroom},                           // an empty heap may still grow by the floor
		{10 * mib, 5 * mib, 15*mib + gcMinHeadroom},     // small heaps: the floor
		{4 * gcMinHeadroom, 0, 5 * gcMinHeadroom},       // where a quarter reaches the floor
		{400 * mib, 8 * mib, 400*mib + 100*mib + 8*mib}, // large heaps: a quarter
		{8 << 30, 64 * mib, 8<<30 + 2<<30 + 64*mib},     // and no overflow at slave sizes
	}
	for _, c := range cases {
		if got := gcLimit(c.live, c.nonHeap); got != c.want {
			t.Errorf("gcLimit(%d MiB, %d MiB) = %d MiB, want %d MiB", c.live/mib, c.nonHeap/mib, got/mib, c.want/mib)
		}
	}
}

func TestTuneGCRespectsEnvironment(t *testing.T) {
	defer debug.SetMemoryLimit(math.MaxInt64)
	for _, env := range []map[string]string{{"GOGC": "100"}, {"GOMEMLIMIT": "1GiB"}, {"GOGC": "off", "GOMEMLIMIT": "2GiB"}} {
		if stop := tuneGC(func(k string) string { return env[k] }); stop != nil {
			stop()
			t.Fatalf("tuned with %v set", env)
		}
		if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
			t.Fatalf("limit %d with %v set", l, env)
		}
	}
}

func TestTuneGCFollowsTheLiveHeap(t *testing.T) {
	runtime.GC()
	stop := tuneGC(func(string) string { return "" })
	if stop == nil {
		t.Fatal("not tuned with an empty environment")
	}
	defer stop()
	runtime.GC()
	runtime.GC() // the finalizer of the first cycle has run
	time.Sleep(10 * time.Millisecond)
	first := debug.SetMemoryLimit(-1)
	if first == math.MaxInt64 || first < gcMinHeadroom {
		t.Fatalf("limit %d after tuning", first)
	}
	// A live heap 64 MiB larger raises the limit after the next
	// collections (the finalizer runs on its own goroutine).
	ballast := make([]byte, 64<<20)
	for i := range ballast {
		ballast[i] = byte(i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for debug.SetMemoryLimit(-1) < first+48<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("limit %d MiB, not raised past %d MiB by a 64 MiB live heap", debug.SetMemoryLimit(-1)>>20, (first+48<<20)>>20)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	runtime.KeepAlive(ballast)
	stop()
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Fatalf("limit %d after stop", l)
	}
}
