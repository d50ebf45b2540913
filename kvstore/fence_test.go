package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
)

// A server with a fence refuses the requests of a fenced sender
// incarnation and serves everyone else (and senders without one).
func TestServerFenceRefusesFencedSenders(t *testing.T) {
	tr := transport.NewMem()
	s, err := NewServer(tr, "n", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateTables("t", "n", []Placement{{Spec: TableSpec{Name: "w", Size: 10}, Hosts: []string{"n"}}}); err != nil {
		t.Fatal(err)
	}
	s.SetFence(func(from uint64) error {
		if from == 3 {
			return errors.New("incarnation 3 is fenced")
		}
		return nil
	})
	in, err := tr.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for _, tc := range []struct {
		from uint64
		want string // "" = acknowledged
	}{{0, ""}, {2, ""}, {3, "incarnation 3 is fenced"}, {4, ""}} {
		t.Run(fmt.Sprint(tc.from), func(t *testing.T) {
			m := Message{Op: OpAdd, Task: "t", Table: "w", Keys: []uint64{1}, Width: 1, DType: Float64, Vals: []float64{1}, From: tc.from}
			if err := tr.Send("n", in.Addr()+".r", AppendMessage(nil, &m)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			msg, err := in.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var rep Message
			if err := DecodeMessage(msg.Data, &rep); err != nil {
				t.Fatal(err)
			}
			if tc.want == "" && rep.Op != OpReply || tc.want != "" && (rep.Op != OpError || !strings.Contains(rep.Err, tc.want)) {
				t.Fatalf("reply %+v, want %q", rep, tc.want)
			}
		})
	}
	st, _ := s.Local("t", "w")
	got := make([]float64, 1)
	st.Get([]uint64{1}, got)
	if got[0] != 3 {
		t.Fatalf("w[1] = %v, want 3: the fenced add must not land", got[0])
	}
}

// A gated Get that may pass at once is answered from the handler's
// scratch buffers, as an ungated one is: no copy of its keys, no closure,
// no fresh answer buffers (it used to allocate all three for every read
// under SSP). Its reply carries the stage's minimum clock.
func TestGatedGetPassingAtOnceAllocatesAsUngated(t *testing.T) {
	tr := transport.NewMem()
	s, err := NewServer(tr, "n", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, task := range []string{"asp", "ssp"} {
		if err := s.CreateTables(task, "n", []Placement{{Spec: TableSpec{Name: "w", Size: 4096, DType: Float32}, Hosts: []string{"n"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PrepareStage("ssp", 0, Consistency{Kind: SSP, Staleness: 1}, 2); err != nil {
		t.Fatal(err)
	}
	s.Gate("ssp", 0).Advance(1, 3) // the other worker is ahead: the minimum clock is worker 0's
	in, err := tr.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	keys := make([]uint64, 1000)
	for i := range keys {
		keys[i] = uint64(i * 4)
	}
	ctx := context.Background()
	get := func(task string) func() {
		data := AppendMessage(nil, &Message{Op: OpGet, Task: task, Table: "w", Worker: 0, Clock: 1, Keys: keys})
		var rep Message
		return func() {
			s.handle(data, in.Addr()+".r")
			msg, err := in.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := decodeRaw(msg.Data, &rep); err != nil || rep.Op != OpReply || len(rep.Raw) != 4*len(keys) {
				t.Fatalf("%s: reply %+v, %v", task, rep, err)
			}
			if want := map[string]int64{"asp": -1, "ssp": 0}[task]; rep.Clock != want {
				t.Fatalf("%s: reply clock %d, want %d", task, rep.Clock, want)
			}
		}
	}
	ungated := testing.AllocsPerRun(50, get("asp"))
	gated := testing.AllocsPerRun(50, get("ssp"))
	if gated > ungated {
		t.Fatalf("a gated Get that passes at once allocates %v times, an ungated one %v", gated, ungated)
	}
}
