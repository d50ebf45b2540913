package slave

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Workers count as lingering once their stage was stopped or cancelled
// with a cause and until they return; a stage that ends normally
// (cancelled without a cause) does not count. A lingering worker is
// warned about after lingerWarn, then every lingerRewarn.
func TestLingerSetCounts(t *testing.T) {
	var l lingerSet
	ended, endNormally := context.WithCancelCause(context.Background())
	stopped, stop := context.WithCancelCause(context.Background())
	running, keep := context.WithCancelCause(context.Background())
	defer keep(nil)
	other, stopOther := context.WithCancelCause(context.Background())
	ws := []*worker{{rank: 0}, {rank: 1}, {rank: 2}, {rank: 3}}
	l.add(ws[0], "a", ended)
	l.add(ws[1], "a", stopped)
	l.add(ws[2], "a", running)
	l.add(ws[3], "b", other)
	endNormally(nil)
	stop(errors.New("stage stopped by the master"))
	stopOther(errors.New("task dropped"))
	now := time.Now()
	var warned []int
	warn := func(w *worker, _ time.Duration) { warned = append(warned, w.rank) }
	for _, tc := range []struct {
		task string
		at   time.Duration
		want int
		warn int // warnings so far
	}{
		{"", 0, 2, 0},
		{"a", 0, 1, 0},
		{"b", 0, 1, 0},
		{"", lingerWarn, 2, 2},
		{"", lingerWarn + time.Second, 2, 2},
		{"", lingerWarn + lingerRewarn, 2, 4},
	} {
		if got := l.count(tc.task, now.Add(tc.at), warn); got != tc.want {
			t.Fatalf("count(%q) at +%v = %d, want %d", tc.task, tc.at, got, tc.want)
		}
		if len(warned) != tc.warn {
			t.Fatalf("at +%v: warnings for %v, want %d", tc.at, warned, tc.warn)
		}
	}
	l.done(ws[1])
	l.settle("b", time.Millisecond) // b's worker still runs: returns after the wait
	if got := l.count("", now, nil); got != 1 {
		t.Fatalf("after worker 1 returned: %d lingering, want 1", got)
	}
	l.done(ws[3])
	l.settle("", time.Minute) // nothing left: returns at once
	if got := l.count("", now, nil); got != 0 {
		t.Fatalf("after every stopped worker returned: %d lingering", got)
	}
}
