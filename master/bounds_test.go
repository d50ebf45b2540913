package master

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/status"
)

func TestCheckJoin(t *testing.T) {
	for _, tc := range []struct {
		req  proto.JoinRequest
		want string // "" = accepted
	}{
		{proto.JoinRequest{ID: "s1", Slots: 2, Instance: "i"}, ""},
		{proto.JoinRequest{ID: "host-42", Slots: MaxSlots, Instance: "i"}, ""},
		{proto.JoinRequest{ID: "", Slots: 2}, "slave id"},
		{proto.JoinRequest{ID: "a.b", Slots: 2}, "slave id"},
		{proto.JoinRequest{ID: "a>", Slots: 2}, "slave id"},
		{proto.JoinRequest{ID: "a b", Slots: 2}, "slave id"},
		{proto.JoinRequest{ID: strings.Repeat("x", 129), Slots: 2}, "slave id"},
		{proto.JoinRequest{ID: "s1", Slots: 0}, "slots"},
		{proto.JoinRequest{ID: "s1", Slots: 2}, "instance"},
		{proto.JoinRequest{ID: "s1", Slots: 2, Instance: strings.Repeat("i", MaxInstance+1)}, "instance"},
		{proto.JoinRequest{ID: "s1", Slots: 1 << 62}, "slots"},
		// Ids and hosts are printed in status tables and logs.
		{proto.JoinRequest{ID: "a\tb", Slots: 2, Instance: "i"}, "slave id"},
		{proto.JoinRequest{ID: "s\x1b[2J", Slots: 2, Instance: "i"}, "control characters"},
		{proto.JoinRequest{ID: "s1", Host: "h\x1b[31m", Slots: 2, Instance: "i"}, `host "h\x1b[31m"`},
		{proto.JoinRequest{ID: "s1", Host: "a\nb", Slots: 2, Instance: "i"}, "host"},
		{proto.JoinRequest{ID: "s1", Host: strings.Repeat("h", 256), Slots: 2, Instance: "i"}, "at most 255 characters"},
		{proto.JoinRequest{ID: "s1", Host: "node-1.example.org", Slots: 2, Instance: "i"}, ""},
	} {
		err := checkJoin(tc.req)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkJoin(%q, %d) = %v, want %q", tc.req.ID, tc.req.Slots, err, tc.want)
		}
	}
}

// A join with absurd slots is refused (it once stayed in status forever),
// and so is a heartbeat carrying one.
func TestOversizedJoinRefused(t *testing.T) {
	h := newHarness(t, "sequential")
	data, _ := json.Marshal(proto.JoinRequest{ID: "big", Slots: 1 << 62})
	msg, err := h.nc.Request(h.subj.Join(), data, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep proto.JoinReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil || rep.OK || !strings.Contains(rep.Error, "slots") {
		t.Fatalf("join reply %s", msg.Data)
	}
	hb, _ := json.Marshal(proto.Heartbeat{ID: "big", Join: proto.JoinRequest{ID: "big", Slots: 1 << 62}})
	h.nc.Publish(h.subj.Heartbeat(), hb)
	h.nc.Flush()
	time.Sleep(50 * time.Millisecond)
	if sl := h.m.Slaves(); len(sl) != 0 {
		t.Fatalf("slaves after refused joins: %+v", sl)
	}
}

// Ended tasks beyond KeepTasks are dropped, oldest first.
func TestEndedTasksArePruned(t *testing.T) {
	h := newHarnessWith(t, "sequential", bus.EmbeddedOptions{}, func(c *Config) { c.KeepTasks = 3 })
	var ids []string
	for i := range 6 {
		id := h.submit(oneStage(fmt.Sprintf("t%d", i), 1, nil)) // no slave: fails at once
		h.wait(id, "ended", status.Task.Ended)
		ids = append(ids, id)
	}
	last := h.submit(oneStage("last", 1, nil))
	h.wait(last, "ended", status.Task.Ended)
	want := []string{ids[4], ids[5], last} // the KeepTasks most recently ended
	var got []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		cl, err := h.m.Status("")
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, tk := range cl.Tasks {
			got = append(got, tk.ID)
		}
		if strings.Join(got, ",") == strings.Join(want, ",") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks after pruning: %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := h.m.Status(ids[0]); err == nil {
		t.Fatal("a pruned task still answers")
	}
}

// A status answer larger than the bus's max_payload leaves out the oldest
// tasks and says how many, instead of failing to send.
func TestStatusFitsOneMessage(t *testing.T) {
	h := newHarnessWith(t, "sequential", bus.EmbeddedOptions{MaxPayload: 16 << 10}, nil)
	for i := range 60 {
		id := h.submit(oneStage(fmt.Sprintf("task-with-a-long-name-%03d-%s", i, strings.Repeat("x", 200)), 1, nil))
		h.wait(id, "ended", status.Task.Ended)
	}
	data, _ := json.Marshal(proto.StatusRequest{})
	msg, err := h.nc.Request(h.subj.Status(), data, 5*time.Second)
	if err != nil {
		t.Fatalf("status request: %v", err)
	}
	var rep proto.StatusReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Omitted == 0 || len(rep.Tasks) == 0 || rep.Omitted+len(rep.Tasks) != 60 {
		t.Fatalf("omitted %d, kept %d of 60", rep.Omitted, len(rep.Tasks))
	}
	if !strings.HasSuffix(rep.Tasks[len(rep.Tasks)-1].Name, "059-"+strings.Repeat("x", 200)) {
		t.Fatal("the newest task was left out")
	}
}

// Ended tasks are also dropped keep_tasks_for after they ended; running
// ones never.
func TestEndedTasksExpireByAge(t *testing.T) {
	h := newHarnessWith(t, "sequential", bus.EmbeddedOptions{}, func(c *Config) { c.KeepTasksFor = time.Hour })
	old := h.submit(oneStage("old", 1, nil)) // no slave: fails at once
	h.wait(old, "ended", status.Task.Ended)
	h.clk.Advance(2 * time.Hour)
	recent := h.submit(oneStage("recent", 1, nil))
	h.wait(recent, "ended", status.Task.Ended)
	cl, err := h.m.Status("")
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Tasks) != 1 || cl.Tasks[0].ID != recent {
		t.Fatalf("tasks after an hour and a half: %+v, want only %s", cl.Tasks, recent)
	}
	h.clk.Advance(2 * time.Hour)
	if cl, _ := h.m.Status(""); len(cl.Tasks) != 0 {
		t.Fatalf("tasks after both expired: %+v", cl.Tasks)
	}
}

// A task of many stages whose results outgrow one bus message still has
// a status answer and events: its oldest stage results are left out and
// counted. Before, its status answer listed no task at all (flexps status
// ID printed an empty table, exit 0), every event of it failed to publish,
// and its follower never saw it end.
func TestStatusOfATaskOfManyStagesFitsAMessage(t *testing.T) {
	const stages = 150
	h := newHarnessWith(t, "sequential", bus.EmbeddedOptions{MaxPayload: 32 << 10}, nil)
	s := h.slave("s1", 1, nil)
	task := oneStage("many", 1, nil).RepeatStages(stages)
	task.ID = "tmany"
	events, err := h.nc.SubscribeSync(h.subj.TaskEvents(task.ID))
	if err != nil {
		t.Fatal(err)
	}
	id := h.submit(task)
	for k := range stages {
		req := h.started(s)
		if req.Stage != k {
			t.Fatalf("started stage %d, want %d", req.Stage, k)
		}
		h.event(proto.WorkerEvent{Task: id, Stage: k, Rank: req.Ranks[0], Slave: "s1", Kind: proto.WorkerDone})
	}
	h.wait(id, "done", inState(status.Done))
	for _, tc := range []struct {
		name string
		req  proto.StatusRequest
	}{
		{"the task", proto.StatusRequest{ID: id}},
		{"every task", proto.StatusRequest{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, _ := json.Marshal(tc.req)
			msg, err := h.nc.Request(h.subj.Status(), data, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var rep proto.StatusReply
			if err := json.Unmarshal(msg.Data, &rep); err != nil {
				t.Fatal(err)
			}
			if len(rep.Tasks) != 1 || rep.Omitted != 0 {
				t.Fatalf("status answer of %d bytes lists %d tasks (%d omitted), want the task", len(msg.Data), len(rep.Tasks), rep.Omitted)
			}
			st := rep.Tasks[0]
			if st.ResultsOmitted == 0 || st.ResultsOmitted+len(st.Results) != stages || st.Results[len(st.Results)-1].Index != stages-1 {
				t.Fatalf("%d results after %d omitted, the last of stage %d; want the latest of %d", len(st.Results), st.ResultsOmitted, st.Results[len(st.Results)-1].Index, stages)
			}
		})
	}
	// The end reached the followers.
	for {
		msg, err := events.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("no done event: %v", err)
		}
		var ev status.Event
		if err := json.Unmarshal(msg.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Kind == status.EventDone {
			if ev.Status.ResultsOmitted == 0 {
				t.Fatalf("done event of %d bytes with all %d results", len(msg.Data), len(ev.Status.Results))
			}
			break
		}
	}
}
