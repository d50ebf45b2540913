package slave

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/master"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var waiting atomic.Int64

func init() {
	// slave.test.nan reports a NaN loss, as a diverging SGD does, then
	// keeps training until it is stopped.
	tasks.Register("slave.test.nan", func(info *tasks.Info) error {
		for info.Ctx.Err() == nil {
			info.Report(10, math.NaN())
			time.Sleep(time.Millisecond)
		}
		return info.Ctx.Err()
	})
	tasks.Register("slave.test.nanepoch", func(info *tasks.Info) error {
		info.ReportEpoch(2, map[string]float64{"loss": math.Inf(1)})
		<-info.Ctx.Done()
		return info.Ctx.Err()
	})
	// slave.test.wait blocks until its stage is cancelled.
	tasks.Register("slave.test.wait", func(info *tasks.Info) error {
		waiting.Add(1)
		<-info.Ctx.Done()
		return info.Ctx.Err()
	})
}

// cluster is a real master and real slaves on an embedded NATS server.
type cluster struct {
	m      *master.Master
	mnc    *nats.Conn // the master's connection
	slaves []*Slave
}

func startCluster(t *testing.T, n, slots int) *cluster {
	t.Helper()
	c, _ := startClusterWith(t, n, slots, master.Config{Log: zerolog.Nop()})
	return c
}

// startClusterWith starts the cluster with the master's configuration
// mcfg; connect opens more connections to its bus.
func startClusterWith(t testing.TB, n, slots int, mcfg master.Config) (c *cluster, connect func(string) *nats.Conn) {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	connect = func(name string) *nats.Conn {
		nc, err := srv.Connect(bus.Options{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	c = &cluster{mnc: connect("master")}
	c.m, err = master.New(c.mnc, mcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.m.Close)
	for i := range n {
		s := New(connect(fmt.Sprintf("slave-%d", i)), Config{ID: fmt.Sprintf("slave-%d", i), Slots: slots, Log: zerolog.Nop()})
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		c.slaves = append(c.slaves, s)
	}
	return c, connect
}

// slave is the cluster's slave with id (nil when none has it).
func (c *cluster) slave(id string) *Slave {
	for _, s := range c.slaves {
		if s.ID() == id {
			return s
		}
	}
	return nil
}

// wait polls the master until the task ended; the test's own deadline
// catches a hang.
func (c *cluster) wait(t *testing.T, id string) status.Task {
	t.Helper()
	for {
		st, err := c.m.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Tasks) == 1 && st.Tasks[0].Ended() {
			return st.Tasks[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNonFiniteLossFailsTheTaskWithAClearError(t *testing.T) {
	tests := []struct {
		fn, want string
	}{
		{"slave.test.nan", "stage sgd worker 0: loss is NaN: the learning rate is likely too large"},
		{"slave.test.nanepoch", "stage sgd worker 0 epoch 2: loss is infinite: the learning rate is likely too large"},
	}
	c := startCluster(t, 1, 2)
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			task := tasks.NewTask("diverge").AddTable(kvstore.TableSpec{Name: "w", Size: 4}).
				SetStages(tasks.Stage{Name: "sgd", Func: tt.fn, Workers: 1})
			id, err := c.m.Submit(context.Background(), task)
			if err != nil {
				t.Fatal(err)
			}
			st := c.wait(t, id)
			if st.State != status.Failed || !strings.Contains(st.Reason, tt.want) {
				t.Fatalf("state %s reason %q, want failed with %q", st.State, st.Reason, tt.want)
			}
		})
	}
}

// A slave hears that a peer holding shards of a running task died: with
// one replica the stage fails naming the node; with two the dead slave's
// shards fail over in the slave's routes and its workers go on (the
// master decides the stage's fate, see TestSurvivableStage*).
func TestDeadPeer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
	}{{"unreplicated stage fails naming the node", 1}, {"replicated stage goes on", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, 2, 2)
			waiting.Store(0)
			task := tasks.NewTask("peer").AddTable(kvstore.TableSpec{Name: "w", Size: 100, Replicas: tc.replicas}).
				SetStages(tasks.Stage{Name: "train", Func: "slave.test.wait", Workers: 4})
			id, err := c.m.Submit(context.Background(), task)
			if err != nil {
				t.Fatal(err)
			}
			for waiting.Load() < 4 {
				time.Sleep(5 * time.Millisecond)
			}
			s := c.slaves[0]
			s.PeerDead("slave-1", "no heartbeat")
			if tc.replicas == 1 {
				st := c.wait(t, id)
				if st.State != status.Failed || !strings.Contains(st.Reason, "slave slave-1 holding its shards died: no heartbeat") {
					t.Fatalf("state %s reason %q", st.State, st.Reason)
				}
				return
			}
			s.mu.Lock()
			running := s.ctl.Running(id, 0)
			s.mu.Unlock()
			if len(running) != 2 {
				t.Fatalf("workers still running on slave-0 after slave-1 died: %v, want its 2", running)
			}
			if r := s.kv.Routes(id); r == nil || r.Alive("slave-1") {
				t.Fatal("slave-0's routes still have slave-1 alive")
			}
			for _, sl := range c.slaves {
				sl.MasterGone("test over") // stops the waiting workers
			}
		})
	}
}

func TestMasterGoneStopsEveryTask(t *testing.T) {
	c := startCluster(t, 1, 2)
	waiting.Store(0)
	task := tasks.NewTask("orphan").SetStages(tasks.Stage{Name: "train", Func: "slave.test.wait", Workers: 2})
	if _, err := c.m.Submit(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	for waiting.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	s := c.slaves[0]
	s.MasterGone("test")
	s.mu.Lock()
	n := len(s.tasks)
	s.mu.Unlock()
	if n != 0 || len(s.ctl.Tasks()) != 0 {
		t.Fatalf("%d tasks left in the driver, %v in the machine", n, s.ctl.Tasks())
	}
}

// tasksLeft is how many tasks the slave still holds.
func tasksLeft(s *Slave) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tasks)
}

// A slave whose master died drops the master's tasks (workers stop,
// shards freed) once the master has been silent for its dead_after.
func TestSilentMasterIsNoticed(t *testing.T) {
	c, _ := startClusterWith(t, 1, 2, master.Config{Heartbeat: 50 * time.Millisecond, DeadAfter: 300 * time.Millisecond, Log: zerolog.Nop()})
	waiting.Store(0)
	task := tasks.NewTask("orphan").AddTable(kvstore.TableSpec{Name: "w", Size: 10}).
		SetStages(tasks.Stage{Name: "train", Func: "slave.test.wait", Workers: 2})
	if _, err := c.m.Submit(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	for waiting.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	s := c.slaves[0]
	if tasksLeft(s) != 1 {
		t.Fatalf("%d tasks on the slave, want 1", tasksLeft(s))
	}
	c.mnc.Close() // the master dies without a word; the bus stays up
	for tasksLeft(s) != 0 {
		time.Sleep(10 * time.Millisecond) // the test's deadline catches a slave that never notices
	}
	if !s.masterGone.Load() {
		t.Fatal("the slave did not record the master as gone")
	}
}

// A master that restarts under the same bus is a new instance: the slave
// drops the old master's tasks at its first sign of life.
func TestRestartedMasterIsNoticed(t *testing.T) {
	c, connect := startClusterWith(t, 1, 2, master.Config{Heartbeat: 50 * time.Millisecond, DeadAfter: time.Minute, Log: zerolog.Nop()})
	waiting.Store(0)
	task := tasks.NewTask("old").SetStages(tasks.Stage{Name: "train", Func: "slave.test.wait", Workers: 2})
	if _, err := c.m.Submit(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	for waiting.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	c.mnc.Close() // the master dies without a word and comes back
	m2, err := master.New(connect("master2"), master.Config{Heartbeat: 50 * time.Millisecond, DeadAfter: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m2.Close)
	s := c.slaves[0]
	for tasksLeft(s) != 0 {
		time.Sleep(10 * time.Millisecond)
	}
	s.amu.Lock()
	inst := s.masterInstance
	s.amu.Unlock()
	if inst == "" {
		t.Fatal("no master instance recorded")
	}
	// The new master's membership starts anew: the slave joins it and
	// takes its views.
	eventually(t, "slave joined the restarted master", func() bool {
		ss := m2.Slaves()
		return s.Incarnation() != 0 && s.Epoch() == m2.Epoch() && len(ss) == 1 && ss[0].Alive && ss[0].Incarnation == s.Incarnation()
	}, func() any { return m2.Slaves() }, func() any { return []uint64{s.Incarnation(), s.Epoch(), m2.Epoch()} })
}

// A master that did not run for longer than failure_timeout asks its
// slaves whether they still run its tasks (holdsTask). The question is a
// sign of life: asked first, the slave's check of the master's silence
// finds none; a slave that declared the master gone says it stopped the
// task, even once the master is heard again.
func TestHoldsTaskAnswersAStalledMaster(t *testing.T) {
	c, _ := startClusterWith(t, 1, 2, master.Config{Heartbeat: 5 * time.Second, DeadAfter: 15 * time.Second, Log: zerolog.Nop()})
	waiting.Store(0)
	task := tasks.NewTask("stalled").SetStages(tasks.Stage{Name: "train", Func: "slave.test.wait", Workers: 2})
	id, err := c.m.Submit(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	for waiting.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	s := c.slaves[0]
	if err := s.holdsTask(id); err != nil {
		t.Fatalf("a slave running the task: %v", err)
	}
	// Asked after a silence its check has not seen yet: no silence.
	s.lastAlive.Store(time.Now().Add(-time.Minute).UnixNano())
	if err := s.holdsTask(id); err != nil {
		t.Fatalf("asked before the check: %v", err)
	}
	s.checkMaster(time.Now())
	if tasksLeft(s) != 1 || s.masterGone.Load() {
		t.Fatal("the check after the question declared the master gone")
	}
	// Declared gone: the task was stopped, and the slave says so.
	s.checkMaster(time.Now().Add(time.Hour))
	if tasksLeft(s) != 0 {
		t.Fatal("the master's silence did not stop the task")
	}
	for _, heard := range []bool{false, true} {
		if heard {
			s.masterGone.Store(false) // the master is heard again
		}
		if err := s.holdsTask(id); err == nil || !strings.Contains(err.Error(), "stopped task "+id) {
			t.Fatalf("master heard again %v: %v, want the task named as stopped", heard, err)
		}
	}
}
