package slave

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
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
			var logs syncBuf
			s := New(connect(id), Config{ID: id, Slots: 1, Log: zerolog.New(&logs).Level(zerolog.WarnLevel)})
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
			// The view without it that the master broadcasts may reach it
			// while it leaves: that is its own leave, not a death.
			time.Sleep(100 * time.Millisecond)
			if l := logs.String(); strings.Contains(l, "fenced") || strings.Contains(l, "declared dead") {
				t.Fatalf("a slave that left logged that it was declared dead:\n%s", l)
			}
		})
	}
}

// syncBuf is a log sink safe for the slave's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
