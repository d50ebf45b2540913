package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// A task whose workers read each other's Adds across slaves gives the same
// answers over every KV transport, and each transport carries what its
// setting says: auto keeps `flexps run`'s slaves on the bus, tcp sends
// every remote request over the direct data plane.
func TestLocalClusterOverEachKVTransport(t *testing.T) {
	for _, tc := range []struct {
		transport string
		direct    bool
	}{
		{"", false}, {"auto", false}, {"nats", false}, {"tcp", true},
	} {
		t.Run("transport="+tc.transport, func(t *testing.T) {
			l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop(),
				Config: engine.ClusterConfig{KV: engine.KVSect{Transport: tc.transport}}})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			task := tasks.NewTask("kv").AddTable(kvstore.TableSpec{Name: "t", Size: 16}).
				SetStages(tasks.Stage{Func: "test.barrier", Workers: 4, Params: tasks.Params{"rounds": 3}})
			if _, err := l.SubmitAndWait(context.Background(), task, nil); err != nil {
				t.Fatal(err)
			}
			var direct uint64
			for _, s := range l.Slaves() {
				st, ok := s.DataPlane()
				if ok != tc.direct {
					t.Fatalf("slave %s has a direct data plane: %v, want %v", s.ID(), ok, tc.direct)
				}
				if st.BusSends != 0 {
					t.Fatalf("slave %s: %+v, want no request over the bus", s.ID(), st)
				}
				direct += st.DirectSends
			}
			// The shards of "t" live on one slave or both: the workers of
			// at least one slave reach the other's.
			if tc.direct && direct == 0 {
				t.Fatal("no request went over the direct data plane")
			}
		})
	}
}

func TestKVConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		kv   engine.KVSect
		want string // "" valid
	}{
		{engine.KVSect{}, ""},
		{engine.KVSect{Transport: "tcp", Listen: "0.0.0.0:7400", Advertise: "node1:7400"}, ""},
		{engine.KVSect{Transport: "udp"}, "kv.transport"},
		{engine.KVSect{Listen: "7400"}, "kv.listen"},
		{engine.KVSect{Advertise: "node1"}, "kv.advertise"},
	} {
		err := (&engine.ClusterConfig{KV: tc.kv}).Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Fatalf("%+v: got %v, want an error naming %q", tc.kv, err, tc.want)
		}
	}
}
