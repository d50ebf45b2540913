package master

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/datastore/hdfs"
	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// A worker that reaches a barrier after its stage ended (another worker
// failed it: an HDFS namenode killed mid-task) is answered that the stage
// is not running. An epoch barrier of a task with checkpoints carries an
// epochWaiter, not the bare message: the master panicked on it
// ("interface {} is master.epochWaiter, not *nats.Msg") and took the
// whole flexps run down.
func TestBarrierOfAnEndedStageIsAnsweredNotPanicked(t *testing.T) {
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
	for _, tc := range []struct {
		name  string
		ckpt  bool
		epoch int
	}{
		{"no checkpoints", false, 3},
		{"checkpoints, epoch barrier", true, 3},
		{"checkpoints, other barrier", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tasks.NewTask("lr")
			spec.ID = "t1"
			spec.Stages = []tasks.Stage{{Name: "sgd"}}
			tr := &taskRun{m: &Master{log: zerolog.Nop()}, spec: spec}
			if tc.ckpt {
				tr.ckpt = &checkpointer{dir: "/ck"}
			}
			// tr.stage is nil: the stage has ended.
			subj := "late.barrier." + strings.ReplaceAll(tc.name, " ", "_")
			sub, err := nc.Subscribe(subj, func(msg *nats.Msg) {
				tr.barrier(msg, proto.BarrierRequest{Stage: 0, Rank: 1, Epoch: tc.epoch})
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			ans, err := nc.Request(subj, nil, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var r proto.CtlReply
			if err := json.Unmarshal(ans.Data, &r); err != nil {
				t.Fatal(err)
			}
			if r.OK || !strings.Contains(r.Error, "barrier of stage 0, which is not running") {
				t.Fatalf("answer %+v, want the stage is not running", r)
			}
		})
	}
}

// Two spellings of one hdfs:// checkpoint dir are one dir: a second task
// on it, while the first runs, is refused (it was not, and the two
// interleaved and pruned each other's checkpoints).
func TestSameCheckpointDirAcrossSpellings(t *testing.T) {
	m := &Master{sources: hdfs.NewSources(hdfs.Config{Namenodes: []string{"nn:8020"}})}
	defer m.sources.Close()
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"hdfs:///ck/lr", "hdfs://nn:8020/ck/lr", true},
		{"hdfs://ns1/ck/lr/", "hdfs://nn:8020//ck/lr", true},
		{"/tmp/ck/lr", "/tmp/ck//lr/", true},
		{"hdfs:///ck/lr", "hdfs://other:8020/ck/lr", false},
		{"hdfs:///ck/lr", "hdfs:///ck/lr2", false},
	} {
		if got := m.sameCheckpointDir(tc.a, tc.b); got != tc.same {
			t.Errorf("sameCheckpointDir(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}
