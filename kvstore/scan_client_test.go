package kvstore_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
)

// pager wraps a transport and checks the scan's flow control: a reader
// never has more than one page request of a node outstanding.
type pager struct {
	transport.Transport
	mu       sync.Mutex
	node     map[string]string // reply address -> node of an outstanding scan page
	inflight map[string]int
	peak     int
	pages    int
}

func newPager(tr transport.Transport) *pager {
	return &pager{Transport: tr, node: map[string]string{}, inflight: map[string]int{}}
}

func (p *pager) Send(node, reply string, data []byte) error {
	if len(data) > 1 && kvstore.Op(data[1]) == kvstore.OpScan {
		p.mu.Lock()
		p.node[reply] = node
		p.inflight[node]++
		p.peak = max(p.peak, p.inflight[node])
		p.pages++
		p.mu.Unlock()
	}
	return p.Transport.Send(node, reply, data)
}

func (p *pager) Reply(addr string, data []byte) error {
	p.mu.Lock()
	if n, ok := p.node[addr]; ok {
		delete(p.node, addr)
		p.inflight[n]--
	}
	p.mu.Unlock()
	return p.Transport.Reply(addr, data)
}

func (p *pager) Serve(node string, h transport.Handler) (io.Closer, error) {
	return p.Transport.Serve(node, h)
}

// scanCluster is n servers and clients on one pager over the in-memory
// transport.
func scanCluster(t *testing.T, n int, specs ...kvstore.TableSpec) (*pager, []*kvstore.Server, []string) {
	t.Helper()
	p := newPager(transport.NewMem())
	var hosts []string
	for i := range n {
		hosts = append(hosts, "s"+string(rune('0'+i)))
	}
	var ps []kvstore.Placement
	for _, s := range specs {
		ps = append(ps, kvstore.Placement{Spec: s, Hosts: hosts})
	}
	var servers []*kvstore.Server
	for _, h := range hosts {
		s, err := kvstore.NewServer(p, h, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.CreateTables("task", h, ps); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
	}
	return p, servers, hosts
}

func scanClient(t *testing.T, tr transport.Transport, hosts []string, self string, srv *kvstore.Server, payload int) *kvstore.Client {
	t.Helper()
	cl, err := kvstore.NewClient(kvstore.ClientConfig{Transport: tr, Task: "task", Stage: -1, Worker: -1, Self: self, Server: srv,
		Hosts: hosts, Consistency: asp, Timeout: 10 * time.Second, MaxPayload: payload, Ctx: context.Background()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// ReadAll returns every table as Get reads it, for every partitioning and
// storage, read from no shard's slave and from a shard's own slave, with
// one page of each remote shard in flight at a time.
func TestReadAllMatchesGet(t *testing.T) {
	specs := []kvstore.TableSpec{
		{Name: "range", Size: 20_000, Width: 2},
		{Name: "hash", Size: 200_000, Partition: kvstore.HashPartition},
		{Name: "hash32", Size: 50_000, Width: 3, DType: kvstore.Float32, Partition: kvstore.HashPartition, Init: "uniform:0.5"},
		{Name: "sparse", Size: 30_000, Storage: kvstore.Sparse, Partition: kvstore.HashPartition, Init: "uniform:1"},
		{Name: "sparse32", Size: 10_000, Width: 2, Storage: kvstore.Sparse, DType: kvstore.Float32},
		{Name: "tiny", Size: 2}, // shards without keys
	}
	for i := range specs {
		specs[i] = specs[i].WithDefaults()
	}
	p, servers, hosts := scanCluster(t, 3, specs...)
	writer := scanClient(t, p, hosts, "", nil, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, spec := range specs {
		tc, err := writer.Table(kvstore.Placement{Spec: spec, Hosts: hosts})
		if err != nil {
			t.Fatal(err)
		}
		var keys []uint64
		for k := range spec.Size {
			if rng.IntN(3) == 0 {
				keys = append(keys, k)
			}
		}
		vals := make([]float64, len(keys)*spec.Width)
		for i := range vals {
			vals[i] = float64(rng.IntN(1000)) / 8
		}
		if err := tc.Add(keys, vals); err != nil {
			t.Fatal(err)
		}
	}
	if err := writer.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, self := range []int{-1, 1} {
		var cl *kvstore.Client
		if self < 0 {
			cl = scanClient(t, p, hosts, "", nil, 64<<10) // small pages: many of them
		} else {
			cl = scanClient(t, p, hosts, hosts[self], servers[self], 64<<10)
		}
		for _, spec := range specs {
			tc, err := cl.Table(kvstore.Placement{Spec: spec, Hosts: hosts})
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float64, spec.Size*uint64(spec.Width))
			if err := tc.GetRange(0, int(spec.Size), want); err != nil {
				t.Fatal(err)
			}
			keys, got, err := tc.ReadAll(1 << 28)
			if err != nil {
				t.Fatalf("%s: %v", spec.Name, err)
			}
			if keys != nil || !slices.Equal(want, got) {
				t.Fatalf("self %d, table %s: ReadAll differs from GetRange", self, spec.Name)
			}
		}
	}
	if p.peak != 1 {
		t.Fatalf("a reader had %d pages of one shard in flight, want 1", p.peak)
	}
	if p.pages < 30 {
		t.Fatalf("only %d pages for the whole scan: pages are not bounded", p.pages)
	}
}

// A sparse table too large for a dense model comes back as its stored
// keys, ascending; a dense one that large is an error naming it.
func TestReadAllSparseKeyed(t *testing.T) {
	sparse := kvstore.TableSpec{Name: "huge", Size: 1 << 40, Width: 2, Storage: kvstore.Sparse, Partition: kvstore.HashPartition}.WithDefaults()
	dense := kvstore.TableSpec{Name: "big", Size: 5000}.WithDefaults()
	p, _, hosts := scanCluster(t, 2, sparse, dense)
	cl := scanClient(t, p, hosts, "", nil, 0)
	tc, err := cl.Table(kvstore.Placement{Spec: sparse, Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	keys := []uint64{1 << 39, 7, 3, 1<<40 - 1, 12345678901}
	vals := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if err := tc.Add(keys, vals); err != nil {
		t.Fatal(err)
	}
	if err := cl.Flush(); err != nil {
		t.Fatal(err)
	}
	gotK, gotV, err := tc.ReadAll(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gotK, []uint64{3, 7, 12345678901, 1 << 39, 1<<40 - 1}) || !slices.Equal(gotV, []float64{5, 6, 3, 4, 9, 10, 1, 2, 7, 8}) {
		t.Fatalf("keys %v vals %v", gotK, gotV)
	}
	td, err := cl.Table(kvstore.Placement{Spec: dense, Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := td.ReadAll(1000); err == nil || !strings.Contains(err.Error(), `"big"`) {
		t.Fatalf("err = %v", err)
	}
}

// A shard host that leaves during a scan fails it with an error naming
// the table, the shard and the slave.
func TestScanNamesTheLostShard(t *testing.T) {
	spec := kvstore.TableSpec{Name: "w", Size: 90_000, Partition: kvstore.HashPartition}.WithDefaults()
	p, servers, hosts := scanCluster(t, 3, spec)
	cl := scanClient(t, p, hosts, "", nil, 64<<10)
	tc, err := cl.Table(kvstore.Placement{Spec: spec, Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	// A failing consumer stops the scan with its error, named the same way.
	boom := errors.New("disk full")
	err = tc.Scan(func([]uint64, []float64) error { return boom })
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `scan of table "w" shard`) {
		t.Fatalf("err = %v", err)
	}
	closed := false
	err = tc.Scan(func(keys []uint64, vals []float64) error {
		if !closed && len(keys) > 0 && keys[0]%3 == 2 {
			servers[2].Close()
			closed = true
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), `table "w" shard 2 on slave s2`) {
		t.Fatalf("err = %v", err)
	}
}

// On a hash-partitioned table a key range goes as one message per owner
// (keys grouped), not one per key; values land where range reads see them.
func TestHashRangeOpsGoByOwner(t *testing.T) {
	spec := kvstore.TableSpec{Name: "h", Size: 30_000, Partition: kvstore.HashPartition, ChunkSize: 1000}.WithDefaults()
	p, _, hosts := scanCluster(t, 3, spec)
	cl := scanClient(t, p, hosts, "", nil, 0)
	tc, err := cl.Table(kvstore.Placement{Spec: spec, Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	deltas := make([]float64, 10_000)
	for i := range deltas {
		deltas[i] = float64(i)
	}
	before := cl.Stats().Requests
	if err := tc.AddRange(5000, len(deltas), deltas); err != nil {
		t.Fatal(err)
	}
	if err := tc.AddChunk([]uint64{29, 5}, make([]float64, 2000)); err != nil {
		t.Fatal(err)
	}
	if err := cl.Flush(); err != nil {
		t.Fatal(err)
	}
	got := make([]float64, 10_000)
	if err := tc.GetRange(5000, len(got), got); err != nil {
		t.Fatal(err)
	}
	chunk := make([]float64, 1000)
	if err := tc.GetChunk([]uint64{5}, chunk); err != nil {
		t.Fatal(err)
	}
	if n := cl.Stats().Requests - before; n > 4*3 {
		t.Fatalf("%d messages for four range operations over 3 shards", n)
	}
	if !slices.Equal(got, deltas) || !slices.Equal(chunk, deltas[:1000]) {
		t.Fatal("range read differs from what was added")
	}
}

// Reads whose keys all live on one shard (sent as they are, answered in
// order into the caller's slice) return every key's value in place when
// they take many messages, with Get and with GetAsync, from another
// slave and from the shard's own, for keys of one shard among several
// and of a one-shard table.
func TestOneShardReadsInPlace(t *testing.T) {
	specs := []kvstore.TableSpec{
		{Name: "range", Size: 30_000, Width: 2},
		{Name: "f32", Size: 30_000, DType: kvstore.Float32},
	}
	for i := range specs {
		specs[i] = specs[i].WithDefaults()
	}
	for _, nodes := range []int{1, 3} {
		p, servers, hosts := scanCluster(t, nodes, specs...)
		for _, spec := range specs {
			lo, hi := uint64(0), spec.Size/uint64(nodes) // shard 0's keys (range partition)
			rng := rand.New(rand.NewPCG(uint64(nodes), 3))
			keys := make([]uint64, 5000)
			for i := range keys {
				keys[i] = lo + rng.Uint64N(hi-lo)
			}
			vals := make([]float64, len(keys)*spec.Width)
			writer := scanClient(t, p, hosts, "", nil, 0)
			wt, err := writer.Table(kvstore.Placement{Spec: spec, Hosts: hosts})
			if err != nil {
				t.Fatal(err)
			}
			uniq := map[uint64]bool{}
			var ks []uint64
			for _, k := range keys {
				if !uniq[k] {
					uniq[k] = true
					ks = append(ks, k)
				}
			}
			set := make([]float64, len(ks)*spec.Width)
			for i, k := range ks {
				for j := range spec.Width {
					set[i*spec.Width+j] = float64(k*10 + uint64(j))
				}
			}
			if err := wt.Set(ks, set); err != nil {
				t.Fatal(err)
			}
			for i, k := range keys {
				for j := range spec.Width {
					vals[i*spec.Width+j] = float64(k*10 + uint64(j))
				}
			}
			for _, from := range []int{-1, 0} { // another slave, the shard's own
				self, srv := "", (*kvstore.Server)(nil)
				if from >= 0 {
					self, srv = hosts[from], servers[from]
				}
				cl := scanClient(t, p, hosts, self, srv, 4096) // ~300 keys a message
				tc, err := cl.Table(kvstore.Placement{Spec: spec, Hosts: hosts})
				if err != nil {
					t.Fatal(err)
				}
				out := make([]float64, len(vals))
				if err := tc.Get(keys, out); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(out, vals) {
					t.Fatalf("%d nodes, %s, from %d: Get read wrong values", nodes, spec.Name, from)
				}
				clear(out)
				pa, err := tc.GetAsync(keys, out)
				if err != nil {
					t.Fatal(err)
				}
				if err := pa.Wait(); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(out, vals) {
					t.Fatalf("%d nodes, %s, from %d: GetAsync read wrong values", nodes, spec.Name, from)
				}
			}
		}
	}
}
