package slave

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/master"
	"github.com/rs/zerolog"
)

// FuzzControlHandlers sends arbitrary bytes to every control subject a
// master and a slave serve (joins, heartbeats, submissions, status,
// cancels, worker events, block and barrier requests, leaves, the slave's
// control requests): whatever arrives, neither panics (a panic in a
// handler would end this process) and the master still answers status.
func FuzzControlHandlers(f *testing.F) {
	c, connect := startClusterWith(f, 1, 2, master.Config{Log: zerolog.Nop()})
	nc := connect("fuzzer")
	subj := bus.For("")
	subjects := []string{subj.Join(), subj.Heartbeat(), subj.Submit(), subj.Status(), subj.Cancel(), subj.Event(),
		subj.Block(), subj.Barrier(), subj.Leave(), subj.SlaveCtl(c.slaves[0].ID())}
	for i := range subjects {
		f.Add(uint8(i), []byte(`{}`))
		f.Add(uint8(i), []byte(`{"id":"slave-0","task":"t1","op":"drop_task","slots":3}`))
	}
	f.Add(uint8(2), []byte(`{"task":{"name":"x","tables":[{"name":"w","size":-5}],"stages":[{"func":"nope"}]}}`))
	f.Add(uint8(9), []byte(`{"op":"create_tables","task":"t","tables":[{"spec":{"name":"w","size":18446744073709551611},"hosts":["slave-0"]}]}`))
	ctl, _ := json.Marshal(proto.SlaveCtl{Op: proto.OpStartWorkers, Task: "t", Stage: 3, Ranks: []int{0, 7}})
	f.Add(uint8(9), ctl)
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		s := subjects[int(which)%len(subjects)]
		// Request, so handlers that answer take their reply path too.
		_, _ = nc.Request(s, data, 50*time.Millisecond)
		if _, err := c.m.Status(""); err != nil {
			t.Fatalf("master status after a message on %s: %v", s, err)
		}
	})
}
