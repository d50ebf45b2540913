package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
)

// TestReadOfSeveralShardsNamesTheDeadHost: a read of a table without
// replicas that spans several shards (the master's window of a dense
// table as it writes a model or checkpoint, a worker's Get), cut short by
// the death of one of their hosts, fails with a SlaveLostError naming
// that host, whichever part it served (it named the read's first host:
// "slave s1 died" when s2 had).
func TestReadOfSeveralShardsNamesTheDeadHost(t *testing.T) {
	const size = 30 // 10 keys per host
	hosts := []string{"n0", "n1", "n2"}
	for _, tc := range []struct {
		name  string
		dead  int
		read  func(tb *TableClient, out []float64) error
		first uint64 // keys first..size-1 are read
	}{
		{"range over every shard, first host dies", 0, nil, 0},
		{"range over every shard, middle host dies", 1, nil, 0},
		{"range over every shard, last host dies", 2, nil, 0},
		{"range over two shards, second dies", 2, nil, 15},
		{"keyed get over every shard, last host dies", 2, func(tb *TableClient, out []float64) error {
			keys := make([]uint64, len(out))
			for i := range keys {
				keys[i] = uint64(i)
			}
			return tb.Get(keys, out)
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := TableSpec{Name: "w", Size: size, Replicas: 1}
			tr := transport.NewMem()
			var servers []*Server
			for _, h := range hosts {
				s, err := NewServer(tr, h, zerolog.Nop())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				if err := s.CreateTables("t", h, []Placement{{Spec: spec, Hosts: hosts}}); err != nil {
					t.Fatal(err)
				}
				servers = append(servers, s)
			}
			// A master-side client: no shard of its own, the task's routes.
			routes := NewRoutes(hosts)
			bh := &blackhole{Transport: tr}
			c, err := NewClient(ClientConfig{Transport: bh, Task: "t", Stage: -1, Worker: -1, Hosts: hosts,
				Consistency: Consistency{Kind: ASP}, Routes: routes, Ctx: context.Background(),
				Timeout: 10 * time.Second, RetryAfter: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tb, err := c.Table(Placement{Spec: spec, Hosts: hosts})
			if err != nil {
				t.Fatal(err)
			}
			// The dead host's requests vanish, as those in flight when a
			// slave is killed do: the read waits for the view.
			dead := hosts[tc.dead]
			bh.drop(dead)
			go func() {
				time.Sleep(50 * time.Millisecond)
				routes.MarkDead(dead)
			}()
			out := make([]float64, size-tc.first)
			if tc.read != nil {
				err = tc.read(tb, out)
			} else {
				err = tb.GetRange(tc.first, len(out), out)
			}
			var lost *SlaveLostError
			if !errors.As(err, &lost) {
				t.Fatalf("read after %s died: %v, want a SlaveLostError", dead, err)
			}
			if lost.Slave != dead {
				t.Fatalf("the read names slave %q (%v), but %s died", lost.Slave, err, dead)
			}
			if want := fmt.Sprintf("slave %s died", dead); !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
		})
	}
}

// blackhole is a Transport whose requests to one node are lost without a
// trace (no error, no answer).
type blackhole struct {
	transport.Transport
	mu   sync.Mutex
	node string
}

func (b *blackhole) drop(node string) {
	b.mu.Lock()
	b.node = node
	b.mu.Unlock()
}

func (b *blackhole) Send(node, reply string, data []byte) error {
	b.mu.Lock()
	lost := node == b.node
	b.mu.Unlock()
	if lost {
		return nil
	}
	return b.Transport.Send(node, reply, data)
}
