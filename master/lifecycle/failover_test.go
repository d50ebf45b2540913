package lifecycle

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

var survives = Survival{Shards: true, Workers: true}

// survivable is twoSlaves with replicated tables and a ps stage.
func survivable() Config {
	cfg := twoSlaves()
	cfg.Survival = survives
	return cfg
}

func TestSurvivability(t *testing.T) {
	rep := func(name string, r int) kvstore.TableSpec { return kvstore.TableSpec{Name: name, Replicas: r} }
	for _, c := range []struct {
		name   string
		kind   string
		tables []kvstore.TableSpec
		want   Survival
		why    string
	}{
		{"replicated ps", tasks.KindPS, []kvstore.TableSpec{rep("w", 2), rep("steps", 3)}, survives, ""},
		{"no tables", tasks.KindPS, nil, survives, ""},
		{"one table unreplicated", tasks.KindPS, []kvstore.TableSpec{rep("w", 2), rep("c", 1)}, Survival{}, "table c has replicas = 1: set replicas = 2"},
		{"local stage", tasks.KindLocal, []kvstore.TableSpec{rep("w", 2)}, Survival{Shards: true}, "stage train runs local workers"},
		{"single stage unreplicated", tasks.KindSingle, []kvstore.TableSpec{rep("w", 1)}, Survival{}, "replicas = 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Survivability("train", c.kind, c.tables)
			if got.Shards != c.want.Shards || got.Workers != c.want.Workers || !strings.Contains(got.Why, c.why) || (c.why == "") != (got.Why == "") {
				t.Fatalf("Survivability = %+v, want %+v with why containing %q", got, c.want, c.why)
			}
		})
	}
}

func TestSlaveDeathFailsWhatCannotSurvive(t *testing.T) {
	dead := errors.New("slave s2 (host h2, pid 7) died: no heartbeat for 900ms")
	for _, c := range []struct {
		name     string
		survival Survival
		slave    string
		want     string
	}{
		{"unreplicated table, worker slave", Survivability("train", tasks.KindPS, []kvstore.TableSpec{{Name: "w", Replicas: 1}}), "s2", "table w has replicas = 1: set replicas = 2 to survive a slave's death"},
		{"unreplicated table, shard host", Survivability("train", tasks.KindPS, []kvstore.TableSpec{{Name: "w", Replicas: 1}}), "s3", "cannot go on without its shards: table w has replicas = 1"},
		{"local stage", Survivability("train", tasks.KindLocal, nil), "s2", "cannot go on without its 1 worker there: stage train runs local workers"},
		{"zero value", Survival{}, "s2", "died"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := twoSlaves()
			cfg.Survival = c.survival
			s := started(t, cfg)
			f := finished(t, s.Step(SlaveDead{Slave: c.slave, Err: dead}))
			if f.Err == nil || !errors.Is(f.Err, dead) || !strings.Contains(f.Err.Error(), c.want) {
				t.Fatalf("error %v, want it to wrap %q and say %q", f.Err, dead, c.want)
			}
		})
	}
}

// With kill -9 a worker hears of the dead peer (a reset connection)
// before the failure detector does: its error then says what would have
// let the stage survive, as the death itself would have.
func TestWorkerThatLostAPeerSaysWhatToSet(t *testing.T) {
	for _, c := range []struct {
		name, lost, want string
	}{
		{"shard host", "s3", "the stage cannot survive losing slave s3: table w has replicas = 1: set replicas = 2"},
		{"worker slave", "s2", "the stage cannot survive losing slave s2: table w has replicas = 1"},
		{"not a slave of the stage", "s9", ""},
		{"not a lost slave", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := twoSlaves()
			cfg.Survival = Survivability("train", tasks.KindPS, []kvstore.TableSpec{{Name: "w", Replicas: 1}})
			s := started(t, cfg)
			f := finished(t, s.Step(WorkerFailed{Stage: 1, Rank: 0, Slave: "s1", Err: "kvstore: slave " + c.lost + " died or became unreachable", Lost: c.lost}))
			if f.Err == nil || !strings.Contains(f.Err.Error(), "worker 0 on slave s1: kvstore: slave") {
				t.Fatalf("error %v, want the worker's", f.Err)
			}
			if got := strings.Contains(f.Err.Error(), "cannot survive"); (c.want == "") == got || !strings.Contains(f.Err.Error(), c.want) {
				t.Fatalf("error %v, want it to say %q", f.Err, c.want)
			}
		})
	}
	s := started(t, survivable())
	f := finished(t, s.Step(WorkerFailed{Stage: 1, Rank: 0, Slave: "s1", Err: "boom", Lost: "s2"}))
	if strings.Contains(f.Err.Error(), "cannot survive") {
		t.Fatalf("a survivable stage's worker error %v names a setting", f.Err)
	}
}

func TestLastWorkersDeathFails(t *testing.T) {
	s := started(t, survivable())
	s.Step(SlaveDead{Slave: "s2"})
	f := finished(t, s.Step(SlaveDead{Slave: "s1", Err: errors.New("slave s1 died")}))
	if f.Err == nil || !strings.Contains(f.Err.Error(), "no worker of stage 1 (train) is left alive") {
		t.Fatalf("error %v, want no worker left", f.Err)
	}
}

func TestShardHostDeathGoesOn(t *testing.T) {
	s := started(t, survivable())
	acts := s.Step(SlaveDead{Slave: "s3", Err: errors.New("slave s3 died")})
	if len(acts) != 1 {
		t.Fatalf("actions %#v, want one failover event", acts)
	}
	p := acts[0].(Publish)
	if p.Kind != status.EventFailover || !strings.Contains(p.Message, "slave s3, which held only shards, died") {
		t.Fatalf("publish %+v", p)
	}
	if again := s.Step(SlaveDead{Slave: "s3"}); again != nil {
		t.Fatalf("second death of s3: %#v", again)
	}
	for r := range 3 {
		s.Step(WorkerDone{Stage: 1, Rank: r, Slave: "s1", Now: at(1)})
	}
	if s.Phase() != Ended {
		t.Fatalf("phase %v after every worker was done", s.Phase())
	}
}

func TestWorkerSlaveDeathCountsItsRanksOut(t *testing.T) {
	s := started(t, survivable())
	s.Step(WorkerEpoch{Stage: 1, Rank: 0, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"samples": 10}})
	s.Step(WorkerEpoch{Stage: 1, Rank: 1, Epoch: 1, Slave: "s1", Metrics: map[string]float64{"samples": 12}})
	s.Step(BarrierArrived{Stage: 1, Rank: 0, Seq: 1, Waiter: "w0"})
	s.Step(BarrierArrived{Stage: 1, Rank: 2, Seq: 1, Waiter: "w2"})
	s.Step(BarrierArrived{Stage: 1, Rank: 1, Seq: 2, Waiter: "w1@2"})
	acts := s.Step(SlaveDead{Slave: "s2", Err: errors.New("slave s2 died")})
	want := []Action{
		ReleaseBlocks{Slave: "s2", Ranks: []int{2}},
		FinishRanks{Stage: 1, Slaves: []string{"s1", "s3"}, Ranks: []int{2}},
		ReleaseBarrier{Waiters: []any{"w2"}, Err: "stage 1 (train): worker 2 is counted out: its slave was declared dead"},
	}
	if len(acts) != len(want)+1 || !reflect.DeepEqual(acts[:3], want) {
		t.Fatalf("death: %#v\nwant %#v and the epoch", acts, want)
	}
	if p, ok := acts[3].(Publish); !ok || p.Kind != status.EventEpoch || p.Epoch.Epoch != 1 || p.Epoch.Metrics["samples"] != 22 {
		t.Fatalf("epoch 1 every survivor reported: %#v", acts[3])
	}
	// The dead rank's reports no longer count; the barrier waits for the
	// living only, and tells them who lives.
	if got := s.Step(BarrierArrived{Stage: 1, Rank: 2, Seq: 2, Waiter: "late"}); !reflect.DeepEqual(got, []Action{ReleaseBarrier{Waiters: []any{"late"}, Err: "stage 1 (train): worker 2 is counted out: its slave was declared dead"}}) {
		t.Fatalf("dead rank's arrival: %#v", got)
	}
	if got := s.Step(BarrierArrived{Stage: 1, Rank: 1, Seq: 1, Waiter: "w1"}); !reflect.DeepEqual(got, []Action{ReleaseBarrier{Waiters: []any{"w0", "w1"}, Live: []int{0, 1}}}) {
		t.Fatalf("barrier 1: %#v", got)
	}
	if got := s.Step(BarrierArrived{Stage: 1, Rank: 0, Seq: 2, Waiter: "w0@2"}); !reflect.DeepEqual(got, []Action{ReleaseBarrier{Waiters: []any{"w0@2", "w1@2"}, Live: []int{0, 1}}}) {
		t.Fatalf("barrier 2: %#v", got)
	}
	// A worker that asks again for a barrier released already (its
	// answer lost on the bus) is answered at once, alone, as a repeat.
	if got := s.Step(BarrierArrived{Stage: 1, Rank: 1, Seq: 1, Waiter: "w1 again"}); !reflect.DeepEqual(got, []Action{ReleaseBarrier{Waiters: []any{"w1 again"}, Live: []int{0, 1}, Repeat: true}}) {
		t.Fatalf("barrier 1 asked again: %#v", got)
	}
	if got := s.Step(BlocksReleased{Slave: "s2", Blocks: 3}); len(got) != 1 ||
		got[0].(Publish).Message != "stage 1 (train): slave s2 died; its worker's 3 unfinished blocks go to the 2 survivors" {
		t.Fatalf("blocks released: %#v", got)
	}
	s.Step(WorkerDone{Stage: 1, Rank: 2, Slave: "s2", Now: at(1)}) // a report that raced the death
	s.Step(WorkerDone{Stage: 1, Rank: 0, Slave: "s1", Now: at(2)})
	f := finished(t, s.Step(WorkerDone{Stage: 1, Rank: 1, Slave: "s1", Now: at(3)}))
	if f.Err != nil {
		t.Fatalf("stage failed: %v", f.Err)
	}
	wantF := []status.Failover{{Slave: "s2", Ranks: []int{2}, Blocks: 3, Survivors: 2}}
	if !reflect.DeepEqual(f.Result.Failovers, wantF) || len(f.Result.WorkerStats) != 2 {
		t.Fatalf("result failovers %+v (want %+v), %d worker stats", f.Result.Failovers, wantF, len(f.Result.WorkerStats))
	}
}

func TestDeathReleasesABarrierTheLivingCompleted(t *testing.T) {
	s := started(t, survivable())
	s.Step(BarrierArrived{Stage: 1, Rank: 0, Seq: 1, Waiter: "w0"})
	s.Step(BarrierArrived{Stage: 1, Rank: 1, Seq: 1, Waiter: "w1"})
	acts := s.Step(SlaveDead{Slave: "s2"})
	last := acts[len(acts)-1]
	if !reflect.DeepEqual(last, ReleaseBarrier{Waiters: []any{"w0", "w1"}, Live: []int{0, 1}}) {
		t.Fatalf("last action %#v, want the barrier released", last)
	}
}

func TestDeathCompletesWhenTheLivingAreDone(t *testing.T) {
	s := started(t, survivable())
	s.Step(WorkerDone{Stage: 1, Rank: 0, Slave: "s1", Now: at(1)})
	s.Step(WorkerDone{Stage: 1, Rank: 1, Slave: "s1", Now: at(1)})
	f := finished(t, s.Step(SlaveDead{Slave: "s2"}))
	if f.Err != nil || len(f.Result.Failovers) != 1 {
		t.Fatalf("finished %+v", f)
	}
}

func TestDeathWhileStarting(t *testing.T) {
	s := New(survivable())
	s.Step(Begin{Now: t0})
	s.Step(SlaveDead{Slave: "s2"})
	// Its start request times out; that answer must not fail the stage.
	if got := s.Step(Acked{Slave: "s2", Op: proto.OpStartWorkers, Err: errors.New("slave s2 did not answer")}); got != nil {
		t.Fatalf("dead slave's failed ack: %#v", got)
	}
	got := s.Step(Acked{Slave: "s1", Op: proto.OpStartWorkers})
	if s.Phase() != Running || len(got) != 1 {
		t.Fatalf("phase %v, actions %#v after the live slave acknowledged", s.Phase(), got)
	}
	// Before Begin: the dead slave gets no start.
	s = New(survivable())
	s.Step(SlaveDead{Slave: "s2"})
	if got := s.Step(Begin{Now: t0}); !reflect.DeepEqual(got, []Action{StartWorkers{Slave: "s1", Ranks: []int{0, 1}}}) {
		t.Fatalf("Begin after a death: %#v", got)
	}
}

func TestTrialStopSkipsTheDead(t *testing.T) {
	cfg := survivable()
	cfg.Trial = 1e9
	s := started(t, cfg)
	s.Step(SlaveDead{Slave: "s2"})
	acts := s.Step(Tick{Now: at(TrialCap * 1e9)}) // no samples came: the trial ends at its cap
	if !reflect.DeepEqual(acts, []Action{StopWorkers{Slave: "s1"}}) {
		t.Fatalf("trial stop: %#v", acts)
	}
}

// A shard host that died in an earlier stage is counted out of every
// later one without a failover event or result each time.
func TestKnownDeathIsQuiet(t *testing.T) {
	s := started(t, survivable())
	if acts := s.Step(SlaveDead{Slave: "s3", Known: true}); len(acts) != 0 {
		t.Fatalf("a known death of a shard host acted: %+v", acts)
	}
	if acts := s.Step(SlaveDead{Slave: "s3"}); len(acts) != 0 {
		t.Fatalf("the same death again acted: %+v", acts)
	}
	var acts []Action
	for r := range 3 {
		acts = s.Step(WorkerDone{Stage: 1, Rank: r, Slave: []string{"s1", "s1", "s2"}[r]})
	}
	if f := finished(t, acts).Result.Failovers; len(f) != 0 {
		t.Fatalf("failovers %+v, want none for a death an earlier stage reported", f)
	}
}

// A slave that left the cluster (a clean shutdown) is worded as such in
// the stage's events and result, not as dead.
func TestSlaveLeaveIsWordedLeft(t *testing.T) {
	for _, tc := range []struct {
		slave, want string
		left        bool
	}{
		{"s3", "slave s3, which held only shards, left; their backups serve them", true},
		{"s3", "slave s3, which held only shards, died; their backups serve them", false},
		{"s2", "slave s2 left; its worker's 1 unfinished block goes to the 2 survivors", true},
		{"s2", "slave s2 died; its worker's 1 unfinished block goes to the 2 survivors", false},
	} {
		s := started(t, survivable())
		acts := s.Step(SlaveDead{Slave: tc.slave, Left: tc.left})
		if tc.slave == "s2" {
			acts = s.Step(BlocksReleased{Slave: "s2", Blocks: 1})
		}
		if len(acts) != 1 || !strings.HasSuffix(acts[0].(Publish).Message, tc.want) {
			t.Errorf("%s left=%v: %#v, want %q", tc.slave, tc.left, acts, tc.want)
		}
		var last []Action
		for r, slave := range []string{"s1", "s1", "s2"} {
			if slave != tc.slave {
				last = s.Step(WorkerDone{Stage: 1, Rank: r, Slave: slave, Now: at(1)})
			}
		}
		f := finished(t, last)
		if fo := f.Result.Failovers; len(fo) != 1 || fo[0].Left != tc.left || fo[0].Went() != map[bool]string{true: "left", false: "died"}[tc.left] {
			t.Errorf("%s left=%v: result failovers %+v", tc.slave, tc.left, fo)
		}
	}
}

// The two remedies of an unreplicated table are two sentences: run
// together ("... replicas = 1: with a [checkpoint] dir, flexps submit
// --resume DIR continues the task"), a task without checkpoints read as
// told to resume.
func TestUnreplicatedWhy(t *testing.T) {
	for _, tc := range []struct {
		replicas int
		want     string
	}{
		{0, "table w has replicas = 1: set replicas = 2 to survive a slave's death. A table a stage localizes must keep replicas = 1; such a task survives through its checkpoints instead"},
		{1, "table w has replicas = 1: set replicas = 2 to survive a slave's death. "},
	} {
		if got := UnreplicatedWhy("w", tc.replicas); !strings.HasPrefix(got, tc.want) {
			t.Errorf("replicas %d: %q, want it to start %q", tc.replicas, got, tc.want)
		}
	}
}

// A worker waiting at a barrier when the stage ends (another worker
// failed, a cancel), or arriving at a barrier of a stage that is not
// running, is told it was stopped, so its slave logs it as stopped and
// counts it so (it logged "worker failed" at ERR on every other slave,
// and counted it in flexps_slave_workers_ended_total{outcome="failed"});
// a worker counted out for its slave's death is not.
func TestBarrierWaitersOfAnEndedStageAreStopped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		steps   func(s *Stage) []Action // the last one's ReleaseBarrier is checked
		stopped bool
	}{
		{"another worker failed", func(s *Stage) []Action {
			s.Step(BarrierArrived{Stage: 1, Rank: 0, Seq: 1, Waiter: "w0"})
			return s.Step(WorkerFailed{Stage: 1, Rank: 2, Slave: "s2", Err: "boom"})
		}, true},
		{"cancelled", func(s *Stage) []Action {
			s.Step(BarrierArrived{Stage: 1, Rank: 0, Seq: 1, Waiter: "w0"})
			return s.Step(Cancel{Err: errors.New("cancelled by the user")})
		}, true},
		{"another stage's barrier", func(s *Stage) []Action {
			return s.Step(BarrierArrived{Stage: 0, Rank: 0, Seq: 1, Waiter: "w0"})
		}, true},
		{"after the end", func(s *Stage) []Action {
			s.Step(Cancel{Err: errors.New("cancelled by the user")})
			return s.Step(BarrierArrived{Stage: 1, Rank: 0, Seq: 1, Waiter: "w0"})
		}, true},
		{"counted out", func(s *Stage) []Action {
			s.Step(SlaveDead{Slave: "s2", Err: errors.New("slave s2 died")})
			return s.Step(BarrierArrived{Stage: 1, Rank: 2, Seq: 1, Waiter: "w2"})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rel *ReleaseBarrier
			for _, a := range tc.steps(started(t, survivable())) {
				if r, ok := a.(ReleaseBarrier); ok {
					rel = &r
				}
			}
			if rel == nil || rel.Err == "" || rel.Stopped != tc.stopped {
				t.Fatalf("release %+v, want an error with Stopped %v", rel, tc.stopped)
			}
		})
	}
}
