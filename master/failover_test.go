package master

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/master/lifecycle"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
)

// A survivable stage on the real master with scripted slaves: the master
// holds a worker's "epoch empty" while another worker's block is out,
// hands it over when that worker's slave leaves, counts the dead ranks
// out of barriers and gates, and finishes with the failover recorded.

// blockAsk sends a block request and returns the reply channel.
func (h *harness) blockAsk(req proto.BlockRequest) <-chan proto.BlockReply {
	h.t.Helper()
	data, err := json.Marshal(req)
	if err != nil {
		h.t.Fatal(err)
	}
	inbox := nats.NewInbox()
	ch := make(chan proto.BlockReply, 1)
	sub, err := h.nc.Subscribe(inbox, func(msg *nats.Msg) {
		var rep proto.BlockReply
		if err := json.Unmarshal(msg.Data, &rep); err != nil {
			rep.Error = "malformed: " + err.Error()
		}
		ch <- rep
	})
	if err != nil {
		h.t.Fatal(err)
	}
	sub.AutoUnsubscribe(1)
	h.t.Cleanup(func() { sub.Unsubscribe() })
	if err := h.nc.PublishRequest(h.subj.Block(), inbox, data); err != nil {
		h.t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		h.t.Fatal(err)
	}
	return ch
}

func (h *harness) reply(ch <-chan proto.BlockReply, what string) proto.BlockReply {
	h.t.Helper()
	select {
	case rep := <-ch:
		return rep
	case <-time.After(5 * time.Second):
		h.t.Fatalf("%s: no answer", what)
		return proto.BlockReply{}
	}
}

// held counts the block requests the master holds for task id.
func (h *harness) held(id string) int {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	n := 0
	for k, as := range h.m.assigners {
		if k.task == id {
			n += len(as.held)
		}
	}
	return n
}

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A numbered block request asked again (its answer lost on the bus, or
// its asker reconnected while it waited) gets the answer the first got,
// not another block; a repeat of a held request takes its place.
func TestBlockRequestAskedAgainGetsTheSameAnswer(t *testing.T) {
	h := newHarness(t, "sequential")
	h.slave("s1", 2, nil)
	s2 := h.slave("s2", 2, nil)
	path := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(path, []byte(strings.Repeat("0123456789\n", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	task := tasks.NewTask("repeat").SetInput("train", tasks.InputSpec{Path: path, Format: "text", BlockSize: 110}).
		SetStages(tasks.Stage{Name: "train", Func: "test.none", Workers: 4, MaxSlaves: 2})
	id := h.submit(task)
	h.started(s2)
	ask := func(seq int64) <-chan proto.BlockReply {
		return h.blockAsk(proto.BlockRequest{Task: id, Stage: 0, Input: "train", Rank: 2, Epoch: 0, Slave: "s2", Instance: "inst-s2", Seq: seq})
	}
	first := h.reply(ask(1), "request 1")
	again := h.reply(ask(1), "request 1 asked again")
	second := h.reply(ask(2), "request 2")
	if first.Error != "" || first.Done || !reflect.DeepEqual(again, first) {
		t.Fatalf("request 1: %+v, asked again: %+v", first, again)
	}
	if second.Error != "" || second.Done || second.Block.String() == first.Block.String() {
		t.Fatalf("request 2 got %+v after %+v: want the other block", second, first)
	}
	// Both blocks are out, unconfirmed: request 3 is held, and so is its
	// repeat, in its place; the repeat gets the answer.
	lost := ask(3)
	h.eventually("request 3 held", func() bool { return h.held(id) == 1 })
	repeat := ask(3)
	time.Sleep(50 * time.Millisecond)
	if n := h.held(id); n != 1 {
		t.Fatalf("%d requests held after the repeat, want 1", n)
	}
	h.clk.Advance(2 * blockHold)
	if rep := h.reply(repeat, "request 3 asked again"); !rep.Retry {
		t.Fatalf("held request 3: %+v, want retry", rep)
	}
	select {
	case rep := <-lost:
		t.Fatalf("the replaced asker was answered too: %+v", rep)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestDriverSurvivesASlavesDeath(t *testing.T) {
	h := newHarness(t, "sequential")
	s1 := h.slave("s1", 2, nil)
	s2 := h.slave("s2", 2, nil)
	path := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(path, []byte(strings.Repeat("0123456789\n", 30)), 0o644); err != nil {
		t.Fatal(err)
	}
	task := tasks.NewTask("drill").SetInput("train", tasks.InputSpec{Path: path, Format: "text", BlockSize: 110}).
		SetStages(tasks.Stage{Name: "train", Func: "test.none", Workers: 4, MaxSlaves: 2})
	id := h.submit(task)
	st1, st2 := h.started(s1), h.started(s2)
	if !st1.Survivable || !st2.Survivable {
		t.Fatalf("start requests not marked survivable: %+v", st1)
	}
	ask := func(slave string, rank, epoch int, confirm *datastore.Block) <-chan proto.BlockReply {
		return h.blockAsk(proto.BlockRequest{Task: id, Stage: 0, Input: "train", Rank: rank, Epoch: epoch, Slave: slave, Instance: "inst-" + slave, Confirm: confirm})
	}
	// Rank 2 on s2 takes a block and never finishes it; rank 0 reads and
	// confirms all the others.
	lost := h.reply(ask("s2", 2, 0, nil), "rank 2's block")
	if lost.Done || lost.Error != "" {
		t.Fatalf("rank 2: %+v", lost)
	}
	var mine []string
	for {
		rep := h.reply(ask("s1", 0, 0, nil), "rank 0's block")
		if rep.Error != "" {
			t.Fatal(rep.Error)
		}
		if rep.Done {
			t.Fatal("epoch empty while rank 2's block is out")
		}
		if rep.Retry {
			t.Fatalf("retry %+v", rep)
		}
		mine = append(mine, rep.Block.String())
		if c := h.reply(ask("s1", 0, 0, &rep.Block), "confirmation"); c.Error != "" {
			t.Fatal(c.Error)
		}
		if len(mine) == 2 {
			break // 3 blocks: rank 2 holds the third
		}
	}
	// The queue is empty, rank 2's block is out: rank 0's request waits.
	waiting := ask("s1", 0, 0, nil)
	h.eventually("rank 0's request held", func() bool { return h.held(id) == 1 })
	// A rank 1 request too, then it is told to ask again after blockHold.
	retry := ask("s1", 1, 0, nil)
	h.eventually("rank 1's request held", func() bool { return h.held(id) == 2 })
	h.clk.Advance(2 * blockHold)
	if rep := h.reply(retry, "rank 1's held request"); !rep.Retry {
		t.Fatalf("held past blockHold: %+v, want retry", rep)
	}
	if rep := h.reply(waiting, "rank 0's held request"); !rep.Retry {
		t.Fatalf("held past blockHold: %+v, want retry", rep)
	}
	waiting = ask("s1", 0, 0, nil)
	h.eventually("rank 0's request held again", func() bool { return h.held(id) == 1 })
	// Ranks 0 and 1 wait at a barrier for ranks 2 and 3.
	barrier := make(chan proto.CtlReply, 2)
	for r := range 2 {
		data, _ := json.Marshal(proto.BarrierRequest{Task: id, Stage: 0, Rank: r, Seq: 1})
		go func() {
			msg, err := h.nc.Request(h.subj.Barrier(), data, 5*time.Second)
			var rep proto.CtlReply
			if err == nil {
				err = json.Unmarshal(msg.Data, &rep)
			}
			if err != nil {
				rep.Error = err.Error()
			}
			barrier <- rep
		}()
	}
	h.eventually("two at the barrier", func() bool { return h.waiting(id) })

	// s2 leaves: its ranks are counted out, its block goes to rank 0.
	data, _ := json.Marshal(proto.Leave{ID: "s2", Instance: "inst-s2"})
	if err := h.nc.Publish(h.subj.Leave(), data); err != nil {
		t.Fatal(err)
	}
	rep := h.reply(waiting, "rank 0's held request after the death")
	if rep.Block.String() != lost.Block.String() {
		t.Fatalf("rank 0 got %+v, want rank 2's unfinished block %v", rep, lost.Block)
	}
	for range 2 {
		if b := <-barrier; !b.OK || !reflect.DeepEqual(b.Live, []int{0, 1}) {
			t.Fatalf("barrier after the death: %+v, want released with live [0 1]", b)
		}
	}
	h.eventually("s1 told to count ranks 2 and 3 out", func() bool { return slices.Contains(s1.seen(), proto.OpFinishRanks) })
	// The dead slave's late requests are refused.
	if late := h.reply(ask("s2", 2, 0, &lost.Block), "the dead rank's confirmation"); late.Error == "" {
		t.Fatalf("confirmation of a fenced slave accepted: %+v", late)
	}
	if c := h.reply(ask("s1", 0, 0, &rep.Block), "confirmation"); c.Error != "" {
		t.Fatal(c.Error)
	}
	if end := h.reply(ask("s1", 0, 0, nil), "end of epoch"); !end.Done {
		t.Fatalf("after every block was confirmed: %+v, want done", end)
	}
	for r := range 2 {
		h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: r, Slave: "s1", Kind: proto.WorkerDone})
	}
	st := h.wait(id, "done", inState(status.Done))
	want := []status.Failover{{Slave: "s2", Ranks: []int{2, 3}, Blocks: 1, Survivors: 2, Left: true}} // it left
	if got := st.Results[0].Failovers; !reflect.DeepEqual(got, want) {
		t.Fatalf("failovers %+v, want %+v", got, want)
	}
	if slices.Contains(s2.seen(), proto.OpEndStage) {
		t.Fatalf("the dead slave was sent end_stage: %v", s2.seen())
	}
}

// A task that survived a slave's death goes on with the survivors: its
// later stages, which asked for more workers than the live slaves have
// slots for, run with fewer (as the stage the slave died in did), and the
// followers hear why; they do not fail for the missing slots.
func TestLaterStagesShrinkAfterADeath(t *testing.T) {
	h := newHarness(t, "sequential")
	s1 := h.slave("s1", 2, nil)
	h.slave("s2", 2, nil)
	task := tasks.NewTask("shrink").SetStages(
		tasks.Stage{Name: "a", Func: "test.none", Workers: 4},
		tasks.Stage{Name: "b", Func: "test.none", Workers: 4})
	id := h.submit(task)
	h.wait(id, "running", inState(status.Running))
	data, _ := json.Marshal(proto.Leave{ID: "s2", Instance: "inst-s2"})
	if err := h.nc.Publish(h.subj.Leave(), data); err != nil {
		t.Fatal(err)
	}
	first := h.started(s1)
	h.eventually("s2 counted out", func() bool { return slices.Contains(s1.seen(), proto.OpFinishRanks) })
	for _, r := range first.Ranks {
		h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: r, Slave: "s1", Kind: proto.WorkerDone})
	}
	second := h.started(s1)
	if second.Stage != 1 || second.Workers != 2 || len(second.Ranks) != 2 {
		t.Fatalf("stage b started as %+v, want its 2 workers on s1", second)
	}
	for _, r := range second.Ranks {
		h.event(proto.WorkerEvent{Task: id, Stage: 1, Rank: r, Slave: "s1", Kind: proto.WorkerDone})
	}
	st := h.wait(id, "done", inState(status.Done))
	if n := st.Results[1].Note; !strings.Contains(n, "runs 2 of its 4 workers: slave s2 died") {
		t.Fatalf("stage b's note %q does not say why it ran fewer workers", n)
	}
}

// A slave that leaves while it is asked to create the task's tables or
// prepare the stage (its answer comes from an incarnation no longer a
// member, and is refused): the stage goes on without it, as it would had
// it left a moment later, instead of the task failing with the refused
// answer.
func TestLeaveWhilePreparingGoesOnWithoutIt(t *testing.T) {
	for _, op := range []string{proto.OpCreateTables, proto.OpPrepareStage} {
		t.Run(op, func(t *testing.T) { leaveWhileAsked(t, op) })
	}
}

func leaveWhileAsked(t *testing.T, op string) {
	h := newHarness(t, "sequential")
	s1 := h.slave("s1", 2, nil)
	s2 := h.slave("s2", 2, nil)
	release := make(chan struct{})
	s2.mu.Lock()
	s2.hold = map[string]chan struct{}{op: release}
	s2.mu.Unlock()
	id := h.submit(tasks.NewTask("leave").SetStages(tasks.Stage{Name: "train", Func: "test.none", Workers: 4}))
	h.eventually("s2 asked to "+op, func() bool { return slices.Contains(s2.seen(), op) })
	data, _ := json.Marshal(proto.Leave{ID: "s2", Instance: "inst-s2"})
	if err := h.nc.Publish(h.subj.Leave(), data); err != nil {
		t.Fatal(err)
	}
	h.eventually("s2 counted out", func() bool { return !h.m.isAlive("s2") })
	close(release)
	h.doneWithoutS2(id, s1)
}

// doneWithoutS2 finishes task id's one stage on s1's workers (its 2
// slots) and checks that the task is done with s2's death as its one
// failover.
func (h *harness) doneWithoutS2(id string, s1 *scriptedSlave) {
	h.t.Helper()
	st1 := h.started(s1)
	if len(st1.Ranks) != 2 {
		h.t.Fatalf("s1 started ranks %v, want its 2", st1.Ranks)
	}
	for _, r := range st1.Ranks {
		h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: r, Slave: "s1", Kind: proto.WorkerDone})
	}
	st := h.wait(id, "ended", func(st status.Task) bool { return st.Ended() })
	if st.State != status.Done {
		h.t.Fatalf("task %s: %s", st.State, st.Reason)
	}
	if f := st.Results[0].Failovers; len(f) != 1 || f[0].Slave != "s2" {
		h.t.Fatalf("failovers %+v, want s2's", f)
	}
}

// beat sends a heartbeat of scripted slave id (of slots slots) and gives
// the master a moment to read it.
func (h *harness) beat(id string, slots int) {
	h.t.Helper()
	data, _ := json.Marshal(proto.Heartbeat{ID: id, Join: proto.JoinRequest{ID: id, Host: "host-" + id, Slots: slots, PID: 7, Instance: "inst-" + id}})
	if err := h.nc.Publish(h.subj.Heartbeat(), data); err != nil {
		h.t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		h.t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
}

// A slave killed a moment before its stage starts (nothing answers its
// control subject; the failure detector has not declared it dead yet):
// the start waits for the detector's verdict, and the stage goes on
// without it, as it would had the slave died a moment later, instead of
// failing with "did not answer start_workers: no responders".
func TestStartToAJustKilledSlaveAwaitsItsDeath(t *testing.T) {
	h := newHarness(t, "sequential")
	s1 := h.slave("s1", 2, nil)
	s2 := h.slave("s2", 2, nil)
	if err := s2.sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	id := h.submit(tasks.NewTask("k").SetStages(tasks.Stage{Name: "train", Func: "test.none", Workers: 4}))
	h.eventually("the tables asked for", func() bool { return slices.Contains(s1.seen(), proto.OpCreateTables) })
	for range 3 { // s1 beats, s2 stays silent past the failure timeout
		h.beat("s1", 2)
		h.clk.Advance(deadAfter / 2)
	}
	h.beat("s1", 2)
	h.eventually("s2 declared dead", func() bool { return !h.m.isAlive("s2") })
	h.doneWithoutS2(id, s1)
}

// A worker asking for a block of a stage that is no longer running (it
// was cancelled, another worker failed, Ctrl-C) is told the stage was
// stopped, so it stops without an error of its own.
func TestBlockOfAStoppedStageSaysStopped(t *testing.T) {
	h := newHarness(t, "sequential")
	s := h.slave("s1", 1, nil)
	id := h.submit(oneStage("lr", 1, nil))
	h.started(s)
	h.wait(id, "running", inState(status.Running))
	ask := func(input string) proto.BlockReply {
		return h.reply(h.blockAsk(proto.BlockRequest{Task: id, Stage: 0, Input: input, Rank: 0, Slave: "s1", Instance: "inst-s1"}), "block "+input)
	}
	h.cancel(id)
	h.wait(id, "cancelled", inState(status.Cancelled))
	if rep := ask("train"); !rep.Stopped || !strings.Contains(rep.Error, "is not running") {
		t.Fatalf("stopped stage: %+v, want Stopped", rep)
	}
}

// A slave that leaves or dies during an auto stage's trials takes its
// slots out of the search: the trials go on with the parallelisms the
// survivors have slots for, and the stage runs with the best of those.
// The trials were planned once, at the start: the next one, or the chosen
// parallelism measured before the death, asked for more workers than were
// left and failed the task ("asks for 4 workers but the cluster has 2
// worker slots").
func TestAutoTrialsShrinkAfterADeath(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leaveIn int // s2 leaves during the trial of this many workers
		trials  []int
		note    string // the chosen run's note says
	}{
		{"during the first trial", 1, []int{1, 2}, "chose 2 workers (highest measured throughput)"},
		{"during the best trial", 4, []int{1, 2, 4}, "chose 2 workers (highest measured throughput the live slaves have the slots for: 2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "sequential")
			slaves := []*scriptedSlave{h.slave("s1", 2, nil), h.slave("s2", 2, nil)}
			const trial = time.Second
			task := tasks.NewTask("auto").SetStages(tasks.Stage{Name: "train", Func: "test.none", Auto: true, AutoTrialSeconds: trial.Seconds()})
			id := h.submit(task)
			// starts collects the ranks a run of w workers started, by slave.
			starts := func(w int) map[string][]int {
				out := map[string][]int{}
				for n := 0; n < w; {
					select {
					case req := <-slaves[0].starts:
						out["s1"], n = append(out["s1"], req.Ranks...), n+len(req.Ranks)
					case req := <-slaves[1].starts:
						out["s2"], n = append(out["s2"], req.Ranks...), n+len(req.Ranks)
					case <-time.After(5 * time.Second):
						st, _ := h.m.Status(id)
						t.Fatalf("the run of %d workers started %d: task %s (%s)", w, n, st.Tasks[0].State, st.Tasks[0].Reason)
					}
				}
				return out
			}
			for _, w := range tc.trials {
				ranks := starts(w)
				if w == tc.leaveIn {
					data, _ := json.Marshal(proto.Leave{ID: "s2", Instance: "inst-s2"})
					if err := h.nc.Publish(h.subj.Leave(), data); err != nil {
						t.Fatal(err)
					}
					h.eventually("s2 gone", func() bool { return !h.m.isAlive("s2") })
					delete(ranks, "s2")
				}
				slave := "s1"
				if len(ranks["s1"]) == 0 {
					slave = "s2"
				}
				// One sample warms the trial up; then w*100 in one trial
				// length: more workers measure faster.
				ev := proto.WorkerEvent{Task: id, Stage: 0, Rank: ranks[slave][0], Slave: slave, Kind: proto.WorkerProgress, Samples: 1}
				h.event(ev)
				h.clk.Advance(lifecycle.DefaultProgressEvery)
				h.eventually(fmt.Sprintf("the trial of %d warmed up (ranks %v)", w, ranks), func() bool {
					st, _ := h.m.Status(id)
					return st.Tasks[0].Progress.Samples >= 1
				})
				ev.Samples = int64(w * 100)
				h.event(ev)
				stops := func() int {
					return len(slices.DeleteFunc(slaves[0].seen(), func(op string) bool { return op != proto.OpStopStage }))
				}
				before := stops()
				h.clk.Advance(trial)
				if len(ranks["s1"]) > 0 {
					h.eventually("the trial's workers told to stop", func() bool { return stops() > before })
				}
				for s, rs := range ranks {
					for _, r := range rs {
						h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: r, Slave: s, Kind: proto.WorkerError, Error: "stopped"})
					}
				}
			}
			final := starts(2)
			if len(final["s1"]) != 2 {
				t.Fatalf("the chosen run started as %v, want 2 workers on s1", final)
			}
			for _, r := range final["s1"] {
				h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: r, Slave: "s1", Kind: proto.WorkerDone})
			}
			st := h.wait(id, "done", func(st status.Task) bool { return st.State != status.Running && st.State != status.Queued })
			if st.State != status.Done || st.Results[0].Workers != 2 || !strings.Contains(st.Results[0].Note, tc.note) {
				t.Fatalf("task %s (%s): %+v", st.State, st.Reason, st.Results)
			}
		})
	}
}

// A slave that dies or leaves while its stage runs is no longer among the
// slots the task holds: status shows its slots as lost until the stage
// ends (it listed the dead slave among the slots held until then).
func TestStatusShowsADeadSlavesSlotsAsLost(t *testing.T) {
	for _, tc := range s2Goes {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "sequential")
			s1 := h.slave("s1", 2, nil)
			s2 := h.slave("s2", 2, nil)
			id := h.submit(tasks.NewTask("lost").SetStages(tasks.Stage{Name: "train", Func: "test.none", Workers: 4}))
			h.started(s2)
			st := h.wait(id, "holding both slaves' slots", func(st status.Task) bool { return st.State == status.Running && len(st.Slots) == 2 })
			if !reflect.DeepEqual(st.Slots, map[string]int{"s1": 2, "s2": 2}) || st.Lost != nil {
				t.Fatalf("slots %v, lost %v before the death", st.Slots, st.Lost)
			}
			tc.gone(h, s2)
			h.eventually("s2 counted out", func() bool { return !h.m.isAlive("s2") })
			cl, err := h.m.Status(id)
			if err != nil {
				t.Fatal(err)
			}
			if st := cl.Tasks[0]; !reflect.DeepEqual(st.Slots, map[string]int{"s1": 2}) || !reflect.DeepEqual(st.Lost, map[string]int{"s2": 2}) {
				t.Fatalf("after s2 %s: slots %v, lost %v; want s1:2 held, s2:2 lost", tc.name, st.Slots, st.Lost)
			}
			h.doneWithoutS2(id, s1)
			if st := h.wait(id, "ended", func(st status.Task) bool { return st.Ended() }); st.Slots != nil || st.Lost != nil {
				t.Fatalf("ended task: slots %v, lost %v", st.Slots, st.Lost)
			}
		})
	}
}

// s2Goes are the ways scripted slave s2 goes while s1 lives on.
var s2Goes = []struct {
	name string
	gone func(h *harness, s2 *scriptedSlave)
}{
	{"died", func(h *harness, s2 *scriptedSlave) {
		if err := s2.sub.Unsubscribe(); err != nil {
			h.t.Fatal(err)
		}
		for range 3 { // s1 beats, s2 stays silent past the failure timeout
			h.beat("s1", 2)
			h.clk.Advance(deadAfter / 2)
		}
		h.beat("s1", 2)
	}},
	{"left", func(h *harness, s2 *scriptedSlave) {
		data, _ := json.Marshal(proto.Leave{ID: "s2", Instance: "inst-s2"})
		if err := h.nc.Publish(h.subj.Leave(), data); err != nil {
			h.t.Fatal(err)
		}
		s2.sub.Unsubscribe() // its process is gone
	}},
}

// A slave that dies or leaves while a stage runs on it, and is restarted
// under its id, joins with all its slots free; the stage's end gives back
// only the slots it still held. It gave back the dead slave's too, to the
// restarted one, whose slots a second task held meanwhile: the scheduler
// saw them free and a third task's workers overfilled the slave.
func TestRestartedSlavesSlotsAreNotGivenBackTwice(t *testing.T) {
	for _, tc := range s2Goes {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessWith(t, "greedy", bus.EmbeddedOptions{}, nil)
			s1 := h.slave("s1", 2, nil)
			s2 := h.slave("s2", 2, nil)
			a := h.submit(tasks.NewTask("a").SetStages(tasks.Stage{Name: "train", Func: "test.none", Workers: 4}))
			h.started(s2)
			h.wait(a, "running on both slaves", func(st status.Task) bool { return len(st.Slots) == 2 })
			tc.gone(h, s2)
			h.eventually("s2 counted out", func() bool { return !h.m.isAlive("s2") })
			s2b := h.slaveAs("s2", "inst-s2-restarted", 2, nil)
			b := h.submit(tasks.NewTask("b").SetStages(tasks.Stage{Name: "train", Func: "test.none", Workers: 2}))
			h.started(s2b)
			h.wait(b, "running on the restarted s2", func(st status.Task) bool {
				return reflect.DeepEqual(st.Slots, map[string]int{"s2": 2})
			})
			h.doneWithoutS2(a, s1)
			free := map[string]int{}
			for _, s := range h.m.Slaves() {
				free[s.ID] = s.Free
			}
			if want := map[string]int{"s1": 2, "s2": 0}; !reflect.DeepEqual(free, want) {
				t.Fatalf("free slots %v after task a ended, want %v (task b holds the restarted s2's 2)", free, want)
			}
		})
	}
}

// A slave that died or left has no free slots in status (nor in
// flexps_slave_free_slots): it showed those it had when it went, as if
// the scheduler could still use them.
func TestGoneSlaveHasNoFreeSlots(t *testing.T) {
	for _, tc := range s2Goes {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "greedy")
			h.slave("s1", 2, nil)
			s2 := h.slave("s2", 2, nil)
			tc.gone(h, s2)
			h.eventually("s2 counted out", func() bool { return !h.m.isAlive("s2") })
			for _, s := range h.m.Slaves() {
				if want := map[string]int{"s1": 2, "s2": 0}[s.ID]; s.Free != want {
					t.Errorf("slave %s (alive %v): %d free slots, want %d", s.ID, s.Alive, s.Free, want)
				}
			}
		})
	}
}

// A shard host that dies or leaves mid-task and is restarted under its id
// rejoins as a fresh instance holding nothing of the task: the task's
// later stages do not ask it to prepare or end them as a host. They did,
// and its answer, "no tables for task", failed a task that had survived
// the death (by hand: svrg, a slave SIGSTOPped past the timeout).
func TestRestartedHostIsNoHostOfLaterStages(t *testing.T) {
	for _, tc := range s2Goes {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "sequential")
			s1 := h.slave("s1", 2, nil)
			s2 := h.slave("s2", 2, nil)
			id := h.submit(tasks.NewTask("rejoin").SetStages(
				tasks.Stage{Name: "a", Func: "test.none", Workers: 2, Slaves: []string{"s1"}},
				tasks.Stage{Name: "b", Func: "test.none", Workers: 2, Slaves: []string{"s1"}}))
			first := h.started(s1)
			tc.gone(h, s2)
			h.eventually("s2 counted out", func() bool { return !h.m.isAlive("s2") })
			noTables := "kvstore: no tables for task " + id + " on this slave"
			s2b := h.slaveAs("s2", "inst-s2-restarted", 2, map[string]string{proto.OpPrepareStage: noTables, proto.OpEndStage: noTables, proto.OpFinishRanks: noTables})
			for _, r := range first.Ranks {
				h.event(proto.WorkerEvent{Task: id, Stage: 0, Rank: r, Slave: "s1", Kind: proto.WorkerDone})
			}
			second := h.started(s1)
			// A slave hosting none of the shards routes around the dead
			// host (kvstore.Server.GuestRoutes).
			if !slices.Equal(second.DeadHosts, []string{"s2"}) {
				t.Fatalf("stage b started with dead hosts %v, want [s2]", second.DeadHosts)
			}
			for _, r := range second.Ranks {
				h.event(proto.WorkerEvent{Task: id, Stage: 1, Rank: r, Slave: "s1", Kind: proto.WorkerDone})
			}
			st := h.wait(id, "ended", func(st status.Task) bool { return st.Ended() })
			if st.State != status.Done {
				t.Fatalf("task %s: %s", st.State, st.Reason)
			}
			for _, op := range s2b.seen() {
				if op != proto.OpDropTask { // the end's drop, to every slave the task touched, is harmless
					t.Fatalf("the restarted s2 was asked %v", s2b.seen())
				}
			}
		})
	}
}
