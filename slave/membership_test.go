package slave

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/flexps/flexps/master"
	"github.com/rs/zerolog"
)

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func eventually(t *testing.T, what string, cond func() bool, state ...func() any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			var st []any
			for _, f := range state {
				st = append(st, f())
			}
			t.Fatalf("%s: not within 10s; state %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A slave the master declares dead (by the master's injected clock) learns
// it from the membership view and rejoins as a fresh incarnation; its
// peer's KV server refuses requests of the old incarnation and serves the
// new one.
func TestDeclaredDeadSlaveIsFencedAndRejoins(t *testing.T) {
	clk := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c, connect := startClusterWith(t, 2, 2, master.Config{Heartbeat: 20 * time.Millisecond, DeadAfter: time.Second, Log: zerolog.Nop(), Now: clk.Now})
	s0, s1 := c.slaves[0], c.slaves[1]
	inc0, inc1 := s0.Incarnation(), s1.Incarnation()
	eventually(t, "both slaves hold a view listing both", func() bool { return s0.Epoch() >= 2 && s1.Epoch() >= 2 })
	// Jump the master's clock past the failure timeout: a slave whose next
	// beat comes after the master's next tick is declared dead (both may
	// be; the other's beat may keep it alive, so jump until one dies).
	var victim, peer *Slave
	var old uint64
	eventually(t, "a slave declared dead and rejoined", func() bool {
		clk.Advance(2 * time.Second)
		time.Sleep(30 * time.Millisecond)
		switch {
		case s1.Incarnation() > inc1:
			victim, peer, old = s1, s0, inc1
		case s0.Incarnation() > inc0:
			victim, peer, old = s0, s1, inc0
		}
		return victim != nil
	}, func() any { return c.m.Slaves() })
	fresh := victim.Incarnation()
	eventually(t, "the peer learns the victim's new incarnation", func() bool { return peer.Epoch() >= fresh && peer.Incarnation() != 0 })
	if err := peer.fenced(old); err == nil || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("%s serves the old incarnation %d of %s: %v", peer.ID(), old, victim.ID(), err)
	}
	if err := peer.fenced(fresh); err != nil {
		t.Fatalf("%s refuses the new incarnation %d: %v", peer.ID(), fresh, err)
	}
	// Over the wire: a request carrying the old incarnation is refused by
	// slave-0's KV server.
	tr := transport.NewNATS(connect("old-victim"), bus.For("default").SlaveKV)
	in, err := tr.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for _, tc := range []struct {
		from uint64
		want string
	}{{old, "fenced"}, {fresh, "has no shards"}} {
		req := kvstore.AppendMessage(nil, &kvstore.Message{Op: kvstore.OpClock, Task: "none", From: tc.from})
		if err := tr.Send(peer.ID(), in.Addr()+".r", req); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		msg, err := in.Next(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var rep kvstore.Message
		if err := kvstore.DecodeMessage(msg.Data, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Op != kvstore.OpError || !strings.Contains(rep.Err, tc.want) {
			t.Fatalf("request from incarnation %d: %+v, want an error with %q", tc.from, rep, tc.want)
		}
	}
}
