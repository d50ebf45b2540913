package kvstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
)

// replCluster is n in-process nodes hosting one replicated table, each
// with its own membership view (as separate processes have).
type replCluster struct {
	tr      *transport.Mem
	hosts   []string
	servers []*Server
	spec    TableSpec
}

func newReplCluster(t *testing.T, n int, spec TableSpec) *replCluster {
	t.Helper()
	rc := &replCluster{tr: transport.NewMem(), spec: spec}
	for i := range n {
		rc.hosts = append(rc.hosts, fmt.Sprintf("n%d", i))
	}
	for _, h := range rc.hosts {
		s, err := NewServer(rc.tr, h, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTables("t", h, []Placement{{Spec: spec, Hosts: rc.hosts}}); err != nil {
			t.Fatal(err)
		}
		rc.servers = append(rc.servers, s)
		t.Cleanup(func() { s.Close() })
	}
	return rc
}

// kill stops node i's server (its queued requests are lost, as with
// kill -9) and tells the others, as the membership broadcast does.
func (rc *replCluster) kill(i int) {
	rc.servers[i].Close()
	for j, s := range rc.servers {
		if j != i {
			s.PeerDead(rc.hosts[i])
		}
	}
}

func (rc *replCluster) client(t *testing.T, ctx context.Context, i int, worker int32) (*Client, *TableClient) {
	t.Helper()
	c, err := NewClient(ClientConfig{Transport: rc.tr, Task: "t", Worker: worker, Self: rc.hosts[i], Server: rc.servers[i],
		Hosts: rc.hosts, Consistency: Consistency{Kind: ASP}, Routes: rc.servers[i].Routes("t"), Ctx: ctx, Timeout: 10 * time.Second, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := c.Table(Placement{Spec: rc.spec, Hosts: rc.hosts})
	if err != nil {
		t.Fatal(err)
	}
	return c, tc
}

// adder is one worker adding 1 to random keys; acked[k] counts its Adds
// of k a Flush confirmed, sent[k] every Add of k it sent.
type adder struct {
	acked, sent []float64
}

func TestReplicatedAddsSurviveDeaths(t *testing.T) {
	cases := []struct {
		name     string
		nodes    int
		spec     TableSpec
		kills    []int // nodes killed one after the other, with Adds going on
		rounds   int
		keysEach int
	}{
		{"dense range R2 3 nodes", 3, TableSpec{Name: "w", Size: 300, Replicas: 2}, []int{1}, 400, 40},
		{"sparse hash R2 3 nodes", 3, TableSpec{Name: "w", Size: 1 << 30, Storage: Sparse, Partition: HashPartition, Replicas: 2}, []int{2}, 400, 40},
		{"float32 R3 4 nodes", 4, TableSpec{Name: "w", Size: 400, DType: Float32, Replicas: 3}, []int{0}, 400, 40},
		{"R2 4 nodes two deaths", 4, TableSpec{Name: "w", Size: 400, Replicas: 2}, []int{1, 2}, 600, 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReplCluster(t, tc.nodes, tc.spec)
			keyspace := min(tc.spec.Size, 400)
			keyOf := func(i int) uint64 {
				if tc.spec.Size > 400 {
					return uint64(i) * 2654435761 % tc.spec.Size
				}
				return uint64(i)
			}
			adders := make([]*adder, tc.nodes)
			ctxs := make([]context.CancelFunc, tc.nodes)
			var wg sync.WaitGroup
			phase := make([]chan struct{}, len(tc.kills)+1) // closed when a kill happened
			for i := range phase {
				phase[i] = make(chan struct{})
			}
			errs := make(chan error, tc.nodes)
			var kills, afterKills atomic.Int64 // kills done; rounds finished after the last
			for i := range tc.nodes {
				a := &adder{acked: make([]float64, keyspace), sent: make([]float64, keyspace)}
				adders[i] = a
				ctx, cancel := context.WithCancel(context.Background())
				ctxs[i] = cancel
				c, tbl := rc.client(t, ctx, i, int32(i))
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					rng := rand.New(rand.NewPCG(uint64(i), 7))
					pending := make([]float64, keyspace)
					for r := range tc.rounds {
						keys := make([]uint64, tc.keysEach)
						idx := make([]int, tc.keysEach)
						seen := map[int]bool{}
						for j := range keys {
							k := rng.IntN(int(keyspace))
							for seen[k] {
								k = (k + 1) % int(keyspace)
							}
							seen[k] = true
							idx[j], keys[j] = k, keyOf(k)
						}
						ones := make([]float64, len(keys)*tc.spec.WithDefaults().Width)
						for j := range ones {
							ones[j] = 1
						}
						if err := tbl.Add(keys, ones); err != nil {
							if ctx.Err() != nil {
								return
							}
							errs <- fmt.Errorf("worker %d round %d add: %w", i, r, err)
							return
						}
						for _, k := range idx {
							a.sent[k]++
							pending[k]++
						}
						if r%3 == 2 {
							if err := c.Flush(); err != nil {
								if ctx.Err() != nil {
									return
								}
								errs <- fmt.Errorf("worker %d round %d flush: %w", i, r, err)
								return
							}
							for k, v := range pending {
								a.acked[k] += v
								pending[k] = 0
							}
						}
						if kills.Load() == int64(len(tc.kills)) {
							afterKills.Add(1)
						}
						// Every read checks the table is served whatever died.
						out := make([]float64, len(keys)*tc.spec.WithDefaults().Width)
						if err := tbl.Get(keys, out); err != nil {
							if ctx.Err() != nil {
								return
							}
							errs <- fmt.Errorf("worker %d round %d get: %w", i, r, err)
							return
						}
					}
					if err := c.Flush(); err != nil && ctx.Err() == nil {
						errs <- fmt.Errorf("worker %d final flush: %w", i, err)
						return
					}
					for k, v := range pending {
						a.acked[k] += v
					}
				}()
			}
			for _, victim := range tc.kills {
				time.Sleep(20 * time.Millisecond)
				ctxs[victim]() // its worker stops where it is
				rc.kill(victim)
				kills.Add(1)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if afterKills.Load() == 0 {
				t.Fatal("the workers finished before the kills: the test proves nothing (raise rounds)")
			}
			t.Logf("%d rounds after the kills", afterKills.Load())
			// Read everything back through a survivor.
			alive := 0
			for i := range tc.nodes {
				dead := false
				for _, v := range tc.kills {
					dead = dead || v == i
				}
				if !dead {
					alive = i
					break
				}
			}
			c, tbl := rc.client(t, context.Background(), alive, -1)
			defer c.Close()
			keys := make([]uint64, keyspace)
			for k := range keys {
				keys[k] = keyOf(k)
			}
			w := tc.spec.WithDefaults().Width
			out := make([]float64, len(keys)*w)
			if err := tbl.Get(keys, out); err != nil {
				t.Fatal(err)
			}
			for k := range keys {
				var lo, hi float64
				for i, a := range adders {
					dead := false
					for _, v := range tc.kills {
						dead = dead || v == i
					}
					lo += a.acked[k]
					if dead {
						hi += a.sent[k]
					} else {
						hi += a.acked[k]
					}
				}
				if got := out[k*w]; got < lo || got > hi {
					t.Fatalf("key %d = %v, want in [%v, %v] (every acknowledged Add, at most the dead workers' unacknowledged ones)", keys[k], got, lo, hi)
				}
			}
		})
	}
}

// dropTo is the in-process transport with every request to one node lost
// on its way (the node froze before answering, then died).
type dropTo struct {
	*transport.Mem
	node atomic.Value // string
}

func (d *dropTo) Send(node, reply string, data []byte) error {
	if n, _ := d.node.Load().(string); n == node {
		return nil
	}
	return d.Mem.Send(node, reply, data)
}

// dropClient is an ASP client of node 0 whose transport can be told to
// drop what it sends to one node, and its table; closed with the test.
func (rc *replCluster) dropClient(t *testing.T) (*dropTo, *Client, *TableClient) {
	t.Helper()
	tr := &dropTo{Mem: rc.tr}
	c, err := NewClient(ClientConfig{Transport: tr, Task: "t", Worker: 0, Self: rc.hosts[0], Server: rc.servers[0],
		Hosts: rc.hosts, Consistency: Consistency{Kind: ASP}, Routes: rc.servers[0].Routes("t"), Ctx: context.Background(), Timeout: 10 * time.Second, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tbl, err := c.Table(Placement{Spec: rc.spec, Hosts: rc.hosts})
	if err != nil {
		t.Fatal(err)
	}
	return tr, c, tbl
}

// A replicated table's read started with GetAsync (or GetNext) whose
// shard head dies before answering is read again from the new head, also
// when the death is learnt while the worker waits for another read.
func TestGetAsyncReplicatedSurvivesHeadDeath(t *testing.T) {
	for _, next := range []bool{false, true} {
		t.Run(fmt.Sprintf("next=%v", next), func(t *testing.T) {
			spec := TableSpec{Name: "w", Size: 300, Replicas: 2} // shard s: keys 100s..100s+99, chain n<s>, n<s+1>
			rc := newReplCluster(t, 3, spec)
			tr, c, tbl := rc.dropClient(t)
			keys := []uint64{150, 250}
			if err := tbl.Add(keys, []float64{3, 4}); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			tr.node.Store(rc.hosts[1]) // the head of key 150's shard stops answering
			a := make([]float64, 1)
			start := tbl.GetAsync
			if next {
				start = tbl.GetNext
			}
			pa, err := start(keys[:1], a)
			if err != nil {
				t.Fatal(err)
			}
			rc.kill(1)
			b := make([]float64, 1)
			if err := tbl.Get(keys[1:], b); err != nil { // learns of the death meanwhile
				t.Fatal(err)
			}
			if next {
				if err := c.Clock(); err != nil {
					t.Fatal(err)
				}
			}
			if err := pa.Wait(); err != nil {
				t.Fatalf("the read whose head died: %v", err)
			}
			if a[0] != 3 || b[0] != 4 {
				t.Fatalf("read %v and %v, want 3 and 4", a[0], b[0])
			}
		})
	}
}

// GetFloat32 of a replicated float32 table reads the values Get reads, as
// float32, from every shard's head (this slave's shards too, while its
// writes travel the chain), and a read whose head dies before answering
// is read again from the new head.
func TestGetFloat32Replicated(t *testing.T) {
	spec := TableSpec{Name: "w", Size: 300, Replicas: 2, DType: Float32} // shard s: keys 100s..100s+99, chain n<s>, n<s+1>
	rc := newReplCluster(t, 3, spec)
	tr, c, tbl := rc.dropClient(t)
	keys := []uint64{5, 150, 250, 5, 99}
	if err := tbl.Add(keys, []float64{0.1, 3, 4, 0.2, 1e-3}); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, len(keys))
	if err := tbl.Get(keys, want); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(keys))
	if err := tbl.GetFloat32(keys, got); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != float32(want[i]) {
			t.Fatalf("key %d: GetFloat32 %v, Get %v", keys[i], got[i], want[i])
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	tr.node.Store(rc.hosts[1]) // the head of key 150's shard stops answering
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(50 * time.Millisecond)
		rc.kill(1)
	}()
	one := make([]float32, 1)
	if err := tbl.GetFloat32(keys[1:2], one); err != nil {
		t.Fatalf("the read whose head died: %v", err)
	}
	<-done
	if one[0] != 3 {
		t.Fatalf("read %v from the new head, want 3", one[0])
	}
}

// A node that becomes the head of a shard whose every complete copy died
// (both members of its chain at once) reports it through SetShardLost,
// naming table and shard, so that the task fails even if no worker
// touches the shard; shards with a live complete copy are not reported.
func TestShardLostIsReported(t *testing.T) {
	rc := newReplCluster(t, 3, TableSpec{Name: "w", Size: 30, Replicas: 2})
	type report struct {
		node, task string
		err        error
	}
	got := make(chan report, 16)
	for i, s := range rc.servers {
		s.SetShardLost(func(task string, err error) { got <- report{rc.hosts[i], task, err} })
	}
	// Shard 1 lives on n1 and n2 (ring order from its home): both die.
	rc.servers[1].Close()
	rc.servers[2].Close()
	rc.servers[0].PeerDead(rc.hosts[1])
	rc.servers[0].PeerDead(rc.hosts[2])
	select {
	case r := <-got:
		if r.node != "n0" || r.task != "t" || !errors.Is(r.err, ErrShardLost) || !strings.Contains(r.err.Error(), `table "w" shard 1`) {
			t.Fatalf("report %+v, want n0 reporting table w shard 1 of task t lost", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report of the lost shard")
	}
	// Shards 0 (n0, n1) and 2 (n2, n0) kept a complete copy on n0.
	select {
	case r := <-got:
		t.Fatalf("a second report: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
}

// A node that hosts none of a replicated table's shards (a slave that
// joined after the tables were placed, or one that rejoined under a dead
// host's id as a fresh instance) reads and writes through GuestRoutes,
// which start from the hosts that died before: its requests went to the
// dead hosts, or, under a dead host's id, it failed at once with "should
// host table ... but does not".
func TestGuestNodeRoutesAroundDeadHosts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		self  string
		kill  int // host killed before the guest starts (-1: none)
		later int // host killed while the guest reads (-1: none)
	}{
		{"new node, no death", "n3", -1, -1},
		{"new node, a host died before", "n3", 1, -1},
		{"new node, a host dies later", "n3", -1, 0},
		{"dead host's id again", "n2", 2, -1},
		{"dead host's id again, another dies later", "n2", 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := TableSpec{Name: "w", Size: 30, Replicas: 3}
			rc := newReplCluster(t, 3, spec)
			ctx := context.Background()
			c0, t0 := rc.client(t, ctx, 1, 0)
			keys := make([]uint64, spec.Size)
			ones := make([]float64, spec.Size)
			for i := range keys {
				keys[i], ones[i] = uint64(i), 1
			}
			if err := t0.Add(keys, ones); err != nil {
				t.Fatal(err)
			}
			if err := c0.Flush(); err != nil {
				t.Fatal(err)
			}
			c0.Close()
			var dead []string
			if tc.kill >= 0 {
				rc.kill(tc.kill)
				dead = append(dead, rc.hosts[tc.kill])
			}
			guest, err := NewServer(rc.tr, tc.self, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer guest.Close()
			routes := guest.GuestRoutes("t", rc.hosts, dead)
			c, err := NewClient(ClientConfig{Transport: rc.tr, Task: "t", Worker: 1, Self: tc.self, Server: guest, Hosts: rc.hosts,
				Consistency: Consistency{Kind: ASP}, Routes: routes, Ctx: ctx, Timeout: 10 * time.Second, RetryAfter: 200 * time.Millisecond, Window: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tb, err := c.Table(Placement{Spec: spec, Hosts: rc.hosts})
			if err != nil {
				t.Fatal(err)
			}
			if tc.later >= 0 {
				rc.kill(tc.later)
				guest.PeerDead(rc.hosts[tc.later]) // as the slave's membership view tells it
			}
			got := make([]float64, spec.Size)
			if err := tb.Get(keys, got); err != nil {
				t.Fatal(err)
			}
			for k, v := range got {
				if v != 1 {
					t.Fatalf("key %d = %v, want 1", k, v)
				}
			}
			guest.DropTask("t", nil)
			if again := guest.GuestRoutes("t", rc.hosts, nil); again == routes {
				t.Fatal("the dropped task's routes were kept")
			}
		})
	}
}
