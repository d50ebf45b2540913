package slave

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/flexps/flexps/master"
	"github.com/flexps/flexps/master/membership"
	"github.com/nats-io/nats.go"
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

// within polls cond for up to 10s (eventually for goroutines other than
// the test's).
func within(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// A slave declared dead again while it rejoins (the view fencing its new
// incarnation arrives before, or while, the join's answer is taken) must
// rejoin once more. Before, the nested rejoin was dropped because the
// first one still counted as running: the slave kept a retired
// incarnation whose beats the master refuses, a member of no view, until
// some later membership change happened to fence it again (seen in a
// drill: a slave starved past the timeout twice in a row on a loaded
// host). A fake master scripts the order: the fencing view is in the
// slave's hands before its join is answered (pending: failed every run
// without the fix), or it is sent right after the answer (taken by the
// view subscription; without the fix it fails only when the view comes
// before the rejoin's goroutine returns).
func TestFencedAgainWhileRejoiningRejoinsAgain(t *testing.T) {
	for _, tc := range []struct {
		name         string
		beforeAnswer bool // the fencing view is pending when the join is answered
	}{
		{"view pending at the answer", true},
		{"view after the answer", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, mnc, view := fakeMaster(t)
			subj := bus.For("default")
			var (
				s     *Slave
				ready = make(chan struct{})
				mu    sync.Mutex
				joins []string // instances, in order
			)
			sub, err := mnc.Subscribe(subj.Join(), func(msg *nats.Msg) {
				var req proto.JoinRequest
				if err := json.Unmarshal(msg.Data, &req); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				joins = append(joins, req.Instance)
				n := uint64(len(joins))
				mu.Unlock()
				// Join n admits incarnation n at epoch 2n-1; epoch 2n
				// declares it dead (the second one while it rejoins).
				me := membership.Member{ID: req.ID, Instance: req.Instance, Incarnation: 2*n - 1}
				answer := func() {
					data, _ := json.Marshal(proto.JoinReply{OK: true, Heartbeat: time.Hour, Instance: "m1", DeadAfter: time.Hour, Epoch: 2*n - 1, Incarnation: 2*n - 1})
					if err := msg.Respond(data); err != nil {
						t.Error(err)
					}
				}
				if n != 2 {
					answer()
					return
				}
				<-ready
				if !tc.beforeAnswer {
					answer()
					if !within(func() bool { return s.Incarnation() == 2*n-1 }) {
						t.Error("the slave did not take its new incarnation within 10s")
					}
					view(2*n-1, me)
					view(2 * n)
					return
				}
				view(2*n-1, me)
				view(2 * n)
				if !within(func() bool { v := s.pendingView.Load(); return v != nil && v.Epoch == 2*n }) {
					t.Error("the fencing view did not reach the joining slave within 10s")
				}
				answer()
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			nc, err := srv.Connect(bus.Options{Name: "slave"})
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			s = New(nc, Config{ID: "s1", Slots: 1, Log: zerolog.Nop()})
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			close(ready)
			view(1, membership.Member{ID: "s1", Instance: s.self().instance, Incarnation: 1})
			view(2) // declared dead: the slave rejoins (join 2), and is declared dead again
			eventually(t, "the slave rejoins a second time", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(joins) >= 3
			}, func() any { mu.Lock(); defer mu.Unlock(); return append([]string(nil), joins...) })
			eventually(t, "the slave holds the third incarnation", func() bool { return s.Incarnation() == 5 })
		})
	}
}

// fakeMaster starts a bus and a connection on it playing the master:
// view publishes master "m1"'s membership view.
func fakeMaster(t *testing.T) (srv *bus.Embedded, mnc *nats.Conn, view func(epoch uint64, members ...membership.Member)) {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	mnc, err = srv.Connect(bus.Options{Name: "fake-master"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mnc.Close)
	subj := bus.For("default")
	view = func(epoch uint64, members ...membership.Member) {
		data, err := json.Marshal(proto.Membership{Master: "m1", View: membership.View{Epoch: epoch, Members: members}})
		if err != nil {
			t.Error(err)
			return
		}
		if err := mnc.Publish(subj.Membership(), data); err != nil {
			t.Error(err)
		}
	}
	return srv, mnc, view
}

// The view that follows a slave's clean leave no longer lists it; the
// slave must take it for what it is. Before, every clean shutdown logged,
// at error level, "this slave was declared dead by the master and is
// fenced ... rejoining as a fresh instance" and started a rejoin.
func TestLeaveViewIsNotAFence(t *testing.T) {
	srv, mnc, view := fakeMaster(t)
	subj := bus.For("default")
	var mu sync.Mutex
	joins := 0
	ls, err := mnc.Subscribe(subj.Leave(), func(*nats.Msg) { view(2) })
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Unsubscribe()
	s, logs := admittedSlave(t, srv, mnc, func() {
		mu.Lock()
		joins++
		mu.Unlock()
	})
	view(1, membership.Member{ID: "s1", Instance: s.self().instance, Incarnation: 1})
	eventually(t, "the slave takes the view of its admission", func() bool { return s.Epoch() == 1 })
	s.leave()
	eventually(t, "the slave takes the view of its leave", func() bool { return s.Epoch() == 2 || strings.Contains(logs.String(), "declared dead") })
	if strings.Contains(logs.String(), "declared dead") {
		t.Fatalf("a clean leave logged as a death:\n%s", logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if joins != 1 {
		t.Fatalf("%d joins: the slave rejoined after leaving", joins)
	}
}

// admittedSlave starts slave s1 on srv, admitted by the fake master's
// connection mnc (each join answered OK; onJoin, if set, runs first), and
// returns it with its log; both are closed at the test's end.
func admittedSlave(t *testing.T, srv *bus.Embedded, mnc *nats.Conn, onJoin func()) (*Slave, *syncBuf) {
	t.Helper()
	js, err := mnc.Subscribe(bus.For("default").Join(), func(msg *nats.Msg) {
		if onJoin != nil {
			onJoin()
		}
		data, _ := json.Marshal(proto.JoinReply{OK: true, Heartbeat: time.Hour, Instance: "m1", DeadAfter: time.Hour, Epoch: 1, Incarnation: 1})
		msg.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.Unsubscribe() })
	nc, err := srv.Connect(bus.Options{Name: "slave"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	logs := &syncBuf{}
	s := New(nc, Config{ID: "s1", Slots: 1, Log: zerolog.New(logs)})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, logs
}

// A second process started with the id of a live slave subscribes to the
// id's subjects and asks to join until it is refused for good; meanwhile
// it must leave the live slave's requests to the live slave. Before, it
// answered them too: its answer to a stage's create_tables, when it came
// first, was refused by the master ("slave s2 instance ... is not a
// member"), failing a task on a healthy cluster; and its answer to a
// peer's data-plane hello sent that peer's KV reads to it ("task ... has
// no shards on this slave"), failing the task's output.
func TestSlaveRefusedItsIdAnswersNoRequests(t *testing.T) {
	for _, kv := range []string{"tcp", "nats"} {
		t.Run(kv, func(t *testing.T) { refusedAnswersNoRequests(t, kv) })
	}
}

func refusedAnswersNoRequests(t *testing.T, kv string) {
	srv, mnc, _ := fakeMaster(t)
	subj := bus.For("default")
	js, err := mnc.Subscribe(subj.Join(), func(msg *nats.Msg) {
		data, _ := json.Marshal(proto.JoinReply{InUse: true, Heartbeat: 100 * time.Millisecond, DeadAfter: 1500 * time.Millisecond,
			Error: "slave s1: id in use by live instance X (incarnation 1)"})
		msg.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer js.Unsubscribe()
	nc, err := srv.Connect(bus.Options{Name: "duplicate"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s := New(nc, Config{ID: "s1", Slots: 1, KVTransport: kv, Log: zerolog.New(&syncBuf{})})
	started := make(chan error, 1)
	go func() { started <- s.Start(context.Background()) }()
	time.Sleep(300 * time.Millisecond) // subscribed, asking to join
	req, _ := json.Marshal(proto.SlaveCtl{Op: "drop_task", ReqID: "r1", Task: "t1"})
	for _, subject := range []string{subj.SlaveCtl("s1"), subj.SlaveModelInfo("s1"), subj.SlaveDP("s1"), subj.SlaveKV("s1")} {
		if msg, err := mnc.Request(subject, req, 500*time.Millisecond); err == nil {
			t.Errorf("%s: a slave refused its id answered %q", subject, msg.Data)
		}
	}
	if err := <-started; err == nil || !strings.Contains(err.Error(), "id in use") {
		t.Fatalf("start of a slave whose id is held: %v", err)
	}
}
