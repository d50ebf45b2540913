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
