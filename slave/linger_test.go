package slave

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/master"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
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

// lockedBuffer is a log sink safe for the slave's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var (
	ignoresCtxStarted = make(chan struct{}, 1)
	ignoresCtxRelease = make(chan struct{})
)

func init() {
	// slave.test.ignores-ctx returns only when the test releases it.
	tasks.Register("slave.test.ignores-ctx", func(*tasks.Info) error {
		ignoresCtxStarted <- struct{}{}
		<-ignoresCtxRelease
		return nil
	})
}

// Close waits for a worker whose stage function ignores its context, and
// says so, naming it: it hung without a word (the heartbeat loop that
// logs lingering workers stops first).
func TestCloseNamesTheWorkerItWaitsFor(t *testing.T) {
	defer func(w, tick time.Duration) { closeWarn, closeTick = w, tick }(closeWarn, closeTick)
	closeWarn, closeTick = 50*time.Millisecond, 10*time.Millisecond
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	conn := func(name string) *nats.Conn {
		nc, err := srv.Connect(bus.Options{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	m, err := master.New(conn("master"), master.Config{Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var logs lockedBuffer
	s := New(conn("slave-0"), Config{ID: "slave-0", Slots: 1, Log: zerolog.New(&logs)})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	task := tasks.NewTask("stubborn").SetStages(tasks.Stage{Name: "spin", Func: "slave.test.ignores-ctx", Workers: 1})
	for {
		_, err := m.Submit(context.Background(), task)
		if err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond) // until the slave joined
		task.ID = ""
	}
	<-ignoresCtxStarted
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	want := []string{"Close waits for a worker whose stage function ignores its context", `"func":"slave.test.ignores-ctx"`, `"stage":0`, `"worker":0`}
	deadline := time.Now().Add(10 * time.Second)
	for !containsAll(logs.String(), want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-closed:
		t.Fatal("Close returned while the worker still ran")
	default:
	}
	close(ignoresCtxRelease)
	<-closed
	if !containsAll(logs.String(), want) {
		t.Fatalf("the slave's log does not name the worker Close waits for (%q):\n%s", want, logs.String())
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
