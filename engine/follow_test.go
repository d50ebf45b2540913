package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// A follower whose bus dies with the master that embedded it (kill -9 of
// the master) says so after BusLost, naming the bus, instead of waiting
// out a status request in the reconnect buffer (30 s) and then reporting
// "no master answered ... on : context deadline exceeded".
func TestFollowerSaysWhenTheBusDied(t *testing.T) {
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.URL()
	master, err := srv.Connect(bus.Options{})
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	subj := bus.For("c")
	if _, err := master.Subscribe(subj.Status(), func(m *nats.Msg) {
		data, _ := json.Marshal(proto.StatusReply{Cluster: status.Cluster{Tasks: []status.Task{{ID: "t1", State: status.Running}}}})
		m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	nc, err := bus.Connect(bus.Options{URL: url})
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	defer nc.Close()
	c := engine.NewClient(nc, "c")
	c.BusLost = time.Second
	done := make(chan error, 1)
	go func() {
		_, err := c.Follow(context.Background(), "t1", nil)
		done <- err
	}()
	time.Sleep(3 * time.Second) // a status poll answered: the task runs
	select {
	case err := <-done:
		t.Fatalf("Follow returned while the task ran: %v", err)
	default:
	}
	master.Close()
	srv.Shutdown()
	start := time.Now()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the follower still waits 20s after the bus died")
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, engine.ErrNoMaster) || !strings.Contains(err.Error(), url) || !strings.Contains(err.Error(), "following task t1") {
		t.Fatalf("error %v, want ErrNoMaster naming the task and %s", err, url)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("the follower took %v to give up, with BusLost = 1s", d)
	}
}

// A follower that finds no master on a bus that is up (a master
// restarting: its subscriptions not yet made) asks again for BusLost
// before it gives up; a master back within it is followed to the end.
// Before, the first status poll without an answer ended the follow.
func TestFollowerWaitsOutAMasterWithoutAnswer(t *testing.T) {
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	for _, tc := range []struct {
		name    string
		back    time.Duration // when the master answers; 0: never
		wantErr bool
	}{
		{"back within BusLost", 3 * time.Second, false},
		{"never back", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := bus.Connect(bus.Options{URL: srv.URL()})
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			c := engine.NewClient(nc, "c")
			c.BusLost = 5 * time.Second
			if tc.back > 0 {
				time.AfterFunc(tc.back, func() {
					master, err := srv.Connect(bus.Options{})
					if err != nil {
						t.Error(err)
						return
					}
					t.Cleanup(master.Close)
					master.Subscribe(bus.For("c").Status(), func(m *nats.Msg) {
						data, _ := json.Marshal(proto.StatusReply{Cluster: status.Cluster{Tasks: []status.Task{{ID: "t1", State: status.Done}}}})
						m.Respond(data)
					})
				})
			}
			start := time.Now()
			task, err := c.Follow(context.Background(), "t1", nil)
			took := time.Since(start)
			if tc.wantErr {
				if !errors.Is(err, engine.ErrNoMaster) || !strings.Contains(err.Error(), "following task t1") {
					t.Fatalf("error %v, want ErrNoMaster naming the task", err)
				}
				if took < c.BusLost {
					t.Fatalf("gave up after %v, before BusLost (%v)", took, c.BusLost)
				}
				return
			}
			if err != nil || task.State != status.Done {
				t.Fatalf("followed to %+v, %v; want the task done", task, err)
			}
		})
	}
}

// Every request about a task the master does not know wraps ErrNoTask, as
// the ErrNoTask doc says: Cancel and StopAtCheckpoint returned a bare
// error, so a program could not tell a typo'd ID from a bus failure.
func TestUnknownTaskIsErrNoTask(t *testing.T) {
	l := startLocal(t, 1, 1)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		call func(id string) error
	}{
		{"Cancel", func(id string) error { return l.Cancel(ctx, id) }},
		{"StopAtCheckpoint", func(id string) error { return l.StopAtCheckpoint(ctx, id) }},
		{"Status", func(id string) error { _, err := l.Status(ctx, id); return err }},
		{"Follow", func(id string) error { _, err := l.Follow(ctx, id, nil); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call("t-no-such-task")
			if !errors.Is(err, engine.ErrNoTask) || !strings.Contains(err.Error(), `"t-no-such-task"`) {
				t.Fatalf("%s of an unknown task: %v, want ErrNoTask naming the task", c.name, err)
			}
		})
	}
}

// A nil task is an error of each submitting call, not a panic in
// Normalize (a failed tasks.LoadJob's task, submitted unchecked).
func TestSubmitOfANilTaskIsAnError(t *testing.T) {
	l := startLocal(t, 1, 1)
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		submit func() error
	}{
		{"Submit", func() error { _, err := l.Submit(ctx, nil); return err }},
		{"SubmitAndWait", func() error { _, err := l.SubmitAndWait(ctx, nil, nil); return err }},
		{"SubmitAllAndWait", func() error { _, errs := l.SubmitAllAndWait(ctx, []*tasks.MultiStageTask{nil}, nil); return errs[0] }},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s(nil) panicked: %v", c.name, r)
				}
			}()
			if err := c.submit(); err == nil || !strings.Contains(err.Error(), "the task is nil") {
				t.Fatalf("%s(nil): %v, want an error saying the task is nil", c.name, err)
			}
		})
	}
}

// A Client's durations set to 0 take their defaults: a Timeout of 0 failed
// every request at once with "no master answered". And a request no master
// answers on an in-process bus names that bus and the cluster's name, not
// NATS's default URL (nats://127.0.0.1:4222, where another cluster may
// run) and "".
func TestClientZeroDurationsAndNoMasterMessage(t *testing.T) {
	l := startLocal(t, 1, 1)
	l.Timeout, l.BusLost, l.ExternalBusLost = 0, 0, 0
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := l.Status(ctx, ""); err != nil {
		t.Fatalf("Status with Timeout 0: %v", err)
	}
	if _, err := l.SubmitAndWait(ctx, tasks.NewTask("zero").AddTable(kvstore.TableSpec{Name: "t", Size: 4}).SetStages(tasks.Stage{Func: "test.fill", Workers: 1}), nil); err != nil {
		t.Fatalf("SubmitAndWait with Timeout 0: %v", err)
	}

	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect(bus.Options{Name: "client"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := engine.NewClient(nc, "")
	c.Timeout = 200 * time.Millisecond
	_, err = c.Status(ctx, "")
	if want := `no master answered for cluster "default" on the in-process bus`; !errors.Is(err, engine.ErrNoMaster) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Status without a master: %v, want ErrNoMaster saying %q", err, want)
	}
}

// A call on a closed cluster's or client's connection says who closed it:
// it was NATS's bare "nats: connection closed".
func TestCallsAfterCloseSaySo(t *testing.T) {
	l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 1, Slots: 1, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	ctx := context.Background()
	task := tasks.NewTask("late").SetStages(tasks.Stage{Func: "test.fill", Workers: 1})
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Submit", func() error { _, err := l.Submit(ctx, task); task.ID = ""; return err }},
		{"SubmitAndWait", func() error { _, err := l.SubmitAndWait(ctx, task, nil); task.ID = ""; return err }},
		{"Status", func() error { _, err := l.Status(ctx, ""); return err }},
		{"Cancel", func() error { return l.Cancel(ctx, "t1") }},
		{"Follow", func() error { _, err := l.Follow(ctx, "t1", nil); return err }},
		{"WatchMembership", func() error { _, err := l.WatchMembership(func(engine.Membership) {}); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if want := "the client's connection was closed (Local.Close"; !errors.Is(err, nats.ErrConnectionClosed) || !strings.Contains(err.Error(), want) {
				t.Fatalf("%s after Close: %v, want it to say %q", c.name, err, want)
			}
		})
	}
}
