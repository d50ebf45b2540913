package master

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/status"
	"github.com/nats-io/nats.go"
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
	views := make(chan proto.Membership, 64)
	sub, err := nc.Subscribe(bus.For("t").Membership(), func(msg *nats.Msg) {
		var v proto.Membership
		if err := json.Unmarshal(msg.Data, &v); err != nil {
			t.Errorf("malformed view %s: %v", msg.Data, err)
		}
		select {
		case views <- v:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	beat := func(instance string) {
		data, _ := json.Marshal(proto.Heartbeat{ID: "s9", Join: proto.JoinRequest{ID: "s9", Host: "h", Slots: 3, PID: 42, Instance: instance}})
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
	alive := func(want bool, instance string) func([]status.Slave) bool {
		return func(ss []status.Slave) bool {
			return len(ss) == 1 && ss[0].ID == "s9" && ss[0].Alive == want && ss[0].Slots == 3 && ss[0].Instance == instance
		}
	}
	// waitView waits for a broadcast view of epoch e and returns it.
	waitView := func(e uint64) proto.Membership {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case v := <-views:
				if v.Epoch == e {
					return v
				}
			case <-timeout:
				t.Fatalf("no membership view of epoch %d", e)
			}
		}
	}
	// A master that never saw the join (it restarted) learns the slave
	// from its heartbeat.
	beat("i1")
	waitFor("unknown slave taken in by its heartbeat", alive(true, "i1"))
	if v := waitView(1); len(v.Members) != 1 || v.Members[0].Instance != "i1" || v.Master == "" {
		t.Fatalf("view after the join: %+v", v)
	}
	// Silent longer than dead_after (by the injected clock): dead.
	clk.Advance(2 * time.Second)
	waitFor("silent slave declared dead", alive(false, "i1"))
	if v := waitView(2); len(v.Members) != 0 {
		t.Fatalf("view after the death: %+v", v)
	}
	// Its old incarnation is fenced: beats are refused, events too.
	beat("i1")
	time.Sleep(50 * time.Millisecond)
	if ss := m.Slaves(); ss[0].Alive || m.Epoch() != 2 {
		t.Fatalf("a fenced incarnation was taken back: %+v epoch %d", ss, m.Epoch())
	}
	if err := m.fenced("s9", "i1"); err == nil || !strings.Contains(err.Error(), "declared dead") {
		t.Fatalf("event of the fenced incarnation: %v", err)
	}
	// A fresh instance comes back: alive again with all its slots.
	beat("i2")
	waitFor("dead slave back as a fresh instance", alive(true, "i2"))
	if s := m.Slaves()[0]; s.Free != 3 || s.Incarnation != 3 {
		t.Fatalf("rejoined slave %+v, want 3 free slots and incarnation 3", s)
	}
	if st, err := m.Status(""); err != nil || st.Epoch != 3 {
		t.Fatalf("status epoch %d (%v), want 3", st.Epoch, err)
	}
	// A clean leave is not a death.
	data, _ := json.Marshal(proto.Leave{ID: "s9", Instance: "i2"})
	nc.Publish(bus.For("t").Leave(), data)
	nc.Flush()
	waitFor("left slave", alive(false, "i2"))
	waitView(4)
}
