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

// breakingTransport is a Transport whose connection to one node can be
// broken while the node lives on: the next requests to it are dropped
// and their senders' inboxes get the answer a TCP connection gives the
// requests it carried when it breaks (transport.ErrConnLost).
type breakingTransport struct {
	transport.Transport
	mu      sync.Mutex
	node    string
	drop    int // requests to node still to drop
	inboxes []*breakingInbox
}

type breakingInbox struct {
	transport.Inbox
	mu   sync.Mutex
	lost []transport.Msg
}

func (b *breakingTransport) Listen() (transport.Inbox, error) {
	in, err := b.Transport.Listen()
	if err != nil {
		return nil, err
	}
	bi := &breakingInbox{Inbox: in}
	b.mu.Lock()
	b.inboxes = append(b.inboxes, bi)
	b.mu.Unlock()
	return bi, nil
}

// breakNext drops the next n requests to node.
func (b *breakingTransport) breakNext(node string, n int) {
	b.mu.Lock()
	b.node, b.drop = node, n
	b.mu.Unlock()
}

func (b *breakingTransport) Send(node, reply string, data []byte) error {
	b.mu.Lock()
	if node != b.node || b.drop == 0 {
		b.mu.Unlock()
		return b.Transport.Send(node, reply, data)
	}
	b.drop--
	inboxes := b.inboxes
	b.mu.Unlock()
	for _, in := range inboxes {
		if tail, ok := strings.CutPrefix(reply, in.Addr()+"."); ok {
			in.mu.Lock()
			in.lost = append(in.lost, transport.Msg{Tail: tail, Err: fmt.Errorf("%w: to %s: reset by peer", transport.ErrConnLost, node)})
			in.mu.Unlock()
		}
	}
	return nil
}

func (bi *breakingInbox) Next(ctx context.Context) (transport.Msg, error) {
	for {
		bi.mu.Lock()
		if len(bi.lost) > 0 {
			m := bi.lost[0]
			bi.lost = bi.lost[1:]
			bi.mu.Unlock()
			return m, nil
		}
		bi.mu.Unlock()
		sub, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
		m, err := bi.Inbox.Next(sub)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return m, err
		}
	}
}

// TestBrokenConnectionToALiveSlave: a data-plane connection that breaks
// while the slave at its other end lives on (a reset, a proxy dropping
// it) loses the requests it carried, and no view change comes to send
// them again. Under BSP on a replicated table, one worker's reads, adds
// and clocks to that slave are dropped in turn at every position of an
// iteration; the worker must go on after RetryAfter (it waited out its
// timeout for the read's answer, or at the gate for the lost clock) with
// every read exact and every Add applied once.
func TestBrokenConnectionToALiveSlave(t *testing.T) {
	const rounds, keys = 12, 30
	for _, drop := range []int{1, 3} {
		t.Run(fmt.Sprintf("drop %d", drop), func(t *testing.T) {
			spec := TableSpec{Name: "w", Size: keys, Replicas: 2}
			rc := newReplCluster(t, 3, spec)
			bt := &breakingTransport{Transport: rc.tr}
			for _, s := range rc.servers {
				if err := s.PrepareStage("t", 0, Consistency{Kind: BSP}, 1); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c, err := NewClient(ClientConfig{Transport: bt, Task: "t", Worker: 0, Self: rc.hosts[0], Server: rc.servers[0],
				Hosts: rc.hosts, Consistency: Consistency{Kind: BSP}, Routes: rc.servers[0].Routes("t"), Ctx: ctx,
				Timeout: 5 * time.Second, RetryAfter: time.Second, Window: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tbl, err := c.Table(Placement{Spec: spec, Hosts: rc.hosts})
			if err != nil {
				t.Fatal(err)
			}
			all := make([]uint64, keys)
			ones := make([]float64, keys)
			for k := range all {
				all[k], ones[k] = uint64(k), 1
			}
			got := make([]float64, keys)
			for r := range rounds {
				if r == 3 || r == 7 {
					bt.breakNext(rc.hosts[1], drop)
				}
				if err := tbl.Get(all, got); err != nil {
					t.Fatalf("round %d: get: %v", r, err)
				}
				for k, v := range got {
					if v != float64(r) {
						t.Fatalf("round %d: key %d = %v, want %d (every earlier Add once)", r, k, v, r)
					}
				}
				if err := tbl.Add(all, ones); err != nil {
					t.Fatalf("round %d: add: %v", r, err)
				}
				if err := c.Clock(); err != nil {
					t.Fatalf("round %d: clock: %v", r, err)
				}
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBrokenConnectionReadWithoutReplicas: a read of a table without
// replicas, in a task that has replicated ones (so the client has Routes),
// is sent again too when the connection that carried it broke under a
// live slave: reads change nothing, so sending one twice is safe.
func TestBrokenConnectionReadWithoutReplicas(t *testing.T) {
	c, u, bt, hosts := mixedReplicas(t, 5*time.Second, time.Second)
	keys, vals := make([]uint64, 30), make([]float64, 30)
	for k := range keys {
		keys[k], vals[k] = uint64(k), float64(k)
	}
	if err := u.Add(keys, vals); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	bt.breakNext(hosts[1], 1)
	got := make([]float64, 30)
	if err := u.Get(keys, got); err != nil {
		t.Fatalf("get after the break: %v", err)
	}
	for k, v := range got {
		if v != float64(k) {
			t.Fatalf("key %d = %v, want %d", k, v, k)
		}
	}
}

// A write to a table without replicas that a broken connection carried
// is kept nowhere, so whether it was applied is unknown: in a task with
// replicated tables too (so the client retries rather than failing at
// once), the worker fails at the retry with a SlaveLostError naming the
// live slave, not after its timeout.
func TestBrokenConnectionWriteWithoutReplicas(t *testing.T) {
	c, u, bt, hosts := mixedReplicas(t, 20*time.Second, 200*time.Millisecond)
	keys, vals := make([]uint64, 30), make([]float64, 30)
	for k := range keys {
		keys[k], vals[k] = uint64(k), 1
	}
	bt.breakNext(hosts[1], 1)
	err := u.Add(keys, vals)
	if err == nil {
		err = c.Flush()
	}
	var lost *SlaveLostError
	if !errors.As(err, &lost) || lost.Slave != hosts[1] || !strings.Contains(err.Error(), "without replicas") {
		t.Fatalf("flush after the break: %v, want a SlaveLostError naming %s (not the timeout)", err, hosts[1])
	}
}

// mixedReplicas starts three nodes hosting a replicated table and an
// unreplicated one ("u"), and a client on n0 (with Routes: the task has a
// replicated table) sending through a breakingTransport; it returns the
// client, its table "u", the transport and the hosts.
func mixedReplicas(t *testing.T, timeout, retry time.Duration) (*Client, *TableClient, *breakingTransport, []string) {
	t.Helper()
	repl := TableSpec{Name: "w", Size: 30, Replicas: 2}
	single := TableSpec{Name: "u", Size: 30, Replicas: 1}
	tr := transport.NewMem()
	hosts := []string{"n0", "n1", "n2"}
	var servers []*Server
	for _, h := range hosts {
		s, err := NewServer(tr, h, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.CreateTables("t", h, []Placement{{Spec: repl, Hosts: hosts}, {Spec: single, Hosts: hosts}}); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
	}
	if servers[0].Routes("t") == nil {
		t.Fatal("no routes: the task has a replicated table")
	}
	bt := &breakingTransport{Transport: tr}
	c, err := NewClient(ClientConfig{Transport: bt, Task: "t", Worker: 0, Self: hosts[0], Server: servers[0],
		Hosts: hosts, Consistency: Consistency{Kind: ASP}, Routes: servers[0].Routes("t"), Ctx: context.Background(),
		Timeout: timeout, RetryAfter: retry, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	u, err := c.Table(Placement{Spec: single, Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	return c, u, bt, hosts
}
