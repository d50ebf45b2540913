package master

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/status"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is the failure detector's injected time.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestHeartbeatJoinsDeathAndRejoin(t *testing.T) {
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	m, err := New(nc, Config{Cluster: "t", Heartbeat: 20 * time.Millisecond, DeadAfter: time.Second, Log: zerolog.Nop(), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	beat := func() {
		data, _ := json.Marshal(proto.Heartbeat{ID: "s9", Join: proto.JoinRequest{ID: "s9", Host: "h", Slots: 3, PID: 42}})
		nc.Publish(bus.For("t").Heartbeat(), data)
		nc.Flush()
	}
	waitFor := func(what string, cond func([]status.Slave) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond(m.Slaves()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: slaves %+v", what, m.Slaves())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	alive := func(want bool) func([]status.Slave) bool {
		return func(ss []status.Slave) bool {
			return len(ss) == 1 && ss[0].ID == "s9" && ss[0].Alive == want && ss[0].Slots == 3
		}
	}
	// A master that never saw the join (it restarted) learns the slave
	// from its heartbeat.
	beat()
	waitFor("unknown slave taken in by its heartbeat", alive(true))
	// Silent longer than dead_after (by the injected clock): dead.
	clk.Advance(2 * time.Second)
	waitFor("silent slave declared dead", alive(false))
	// It comes back: alive again with all its slots.
	beat()
	waitFor("dead slave back by heartbeat", alive(true))
	if s := m.Slaves()[0]; s.Free != 3 {
		t.Fatalf("free slots %d, want 3", s.Free)
	}
}
