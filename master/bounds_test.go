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
