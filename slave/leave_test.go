package slave

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/master"
	"github.com/rs/zerolog"
)

// TestCloseLeavesTheCluster: a slave that is closed tells the master it
// leaves, once, also when the context it was started with ended first, as
// `flexps slave` stops on Ctrl-C or SIGTERM (it did not then: the master
// reported a clean shutdown as "slave s1 died: no heartbeat for 967ms;
// it is fenced").
func TestCloseLeavesTheCluster(t *testing.T) {
	_, connect := startClusterWith(t, 0, 1, master.Config{Log: zerolog.Nop()})
	subj := bus.For("default")
	for i, tc := range []struct {
		name       string
		ctxEnded   bool // the Start context ends before Close
		closeTwice bool
	}{
		{"closed while running", false, false},
		{"closed after its context ended (Ctrl-C)", true, false},
		{"closed twice", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			watch := connect("watch")
			sub, err := watch.SubscribeSync(subj.Leave())
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := watch.Flush(); err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("leaver-%d", i)
			s := New(connect(id), Config{ID: id, Slots: 1, Log: zerolog.Nop()})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.ctxEnded {
				cancel()
			}
			s.Close()
			if tc.closeTwice {
				s.Close()
			}
			msg, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("no leave message from %s: %v", id, err)
			}
			var l proto.Leave
			if err := json.Unmarshal(msg.Data, &l); err != nil || l.ID != id {
				t.Fatalf("leave message %q (%v), want one from %s", msg.Data, err, id)
			}
			if msg, err := sub.NextMsg(200 * time.Millisecond); err == nil {
				t.Fatalf("a second leave message: %q", msg.Data)
			}
		})
	}
}
