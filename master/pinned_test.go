package master

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/status"
)

// A stage the live cluster cannot run because slaves it needs are dead
// waits for them to come back and says why, pinned or not; one that no
// known slave could ever run fails at once, naming what is missing.
// Before, a stage pinned to a dead slave failed its task at once, and an
// unpinned stage that only lost slots while it was queued waited.
func TestStageWaitsForDeadSlavesPinnedOrNot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		pinned  []string
		wait    []string // what the waiting notice says; nil: the task fails
		fail    string
	}{
		{"pinned to a dead slave", 2, []string{"s2"}, []string{"stage 0 asks for 2 workers", "its slaves [s2] have 0 worker slots", "[s2] not alive", "it waits until enough slaves are back"}, ""},
		{"unpinned, more than the live slaves have", 4, nil, []string{"stage 0 asks for 4 workers", "the cluster has 2 worker slots on 1 live slave:", "it waits until enough slaves are back"}, ""},
		{"pinned to a slave never seen", 2, []string{"nobody"}, nil, "stage 0 (train): asks for 2 workers but its slaves [nobody] have 0 worker slots; no slave is called [nobody]"},
		{"more than every slave has", 9, nil, nil, "stage 0 (train): asks for 9 workers but the cluster has 2 worker slots on 1 live slave:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "sequential")
			h.slave("s1", 2, nil)
			s2 := h.slave("s2", 2, nil)
			data, _ := json.Marshal(proto.Leave{ID: "s2", Instance: "inst-s2"})
			if err := h.nc.Publish(h.subj.Leave(), data); err != nil {
				t.Fatal(err)
			}
			h.eventually("s2 gone", func() bool { return !h.m.isAlive("s2") })
			task := oneStage("pinned", tc.workers, nil)
			task.Stages[0].Slaves = tc.pinned
			id := h.submit(task)
			if tc.wait == nil {
				st := h.wait(id, "failed", inState(status.Failed))
				if !strings.Contains(st.Reason, tc.fail) {
					t.Fatalf("error %q does not say %q", st.Reason, tc.fail)
				}
				return
			}
			st := h.wait(id, "waiting named", func(st status.Task) bool { return st.Waiting != "" || st.State == status.Failed })
			if st.State != status.Queued {
				t.Fatalf("state %s (%s), want it queued, waiting for s2", st.State, st.Reason)
			}
			for _, want := range append(tc.wait, "flexps cancel "+id) {
				if !strings.Contains(st.Waiting, want) {
					t.Errorf("waiting %q does not say %q", st.Waiting, want)
				}
			}
			s2.sub.Unsubscribe()
			starts := h.rejoin("s2", "inst-s2-again", 2)
			select {
			case <-starts:
			case <-time.After(5 * time.Second):
				t.Fatal("s2 came back, but the stage did not start on the cluster")
			}
			h.wait(id, "running, no longer waiting", func(st status.Task) bool { return st.State == status.Running && st.Waiting == "" })
		})
	}
}

// rejoin joins slave id as a fresh instance (a restarted process) that
// answers every control request; starts receives its worker starts.
func (h *harness) rejoin(id, instance string, slots int) <-chan proto.SlaveCtl {
	h.t.Helper()
	starts := make(chan proto.SlaveCtl, 16)
	sub, err := h.nc.Subscribe(h.subj.SlaveCtl(id), func(msg *nats.Msg) {
		var req proto.SlaveCtl
		if json.Unmarshal(msg.Data, &req) == nil && req.Op == proto.OpStartWorkers {
			starts <- req
		}
		data, _ := json.Marshal(proto.CtlReply{OK: true, Instance: instance})
		msg.Respond(data)
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { sub.Unsubscribe() })
	data, _ := json.Marshal(proto.JoinRequest{ID: id, Host: "host-" + id, Slots: slots, PID: 8, Instance: instance})
	msg, err := h.nc.Request(h.subj.Join(), data, 5*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	var rep proto.JoinReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil || !rep.OK {
		h.t.Fatalf("rejoin %s: %s %v", id, msg.Data, err)
	}
	return starts
}
