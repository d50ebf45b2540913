package kvstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// cluster is n shard servers on the in-memory transport, or on an
// embedded in-process NATS server with a connection each, as slaves in
// separate processes would have (and with tcp, each with a direct TCP
// endpoint over it, as slaves have).
type cluster struct {
	t       testing.TB
	srv     *bus.Embedded // nil on the in-memory transport
	mem     *transport.Mem
	tcp     bool
	conns   []*nats.Conn
	tcps    []*transport.TCP
	servers []*kvstore.Server
	hosts   []string
}

func newCluster(t testing.TB, n int, specs ...kvstore.TableSpec) *cluster {
	return startCluster(t, n, false, specs...)
}

func newNATSCluster(t testing.TB, n int, specs ...kvstore.TableSpec) *cluster {
	return startCluster(t, n, true, specs...)
}

// newTCPCluster is newNATSCluster with every connection a TCP endpoint:
// the servers' named as their hosts, clients' c0, c1, ...
func newTCPCluster(t testing.TB, n int, specs ...kvstore.TableSpec) *cluster {
	return startClusterOn(t, n, true, true, specs...)
}

func startCluster(t testing.TB, n int, useNATS bool, specs ...kvstore.TableSpec) *cluster {
	t.Helper()
	return startClusterOn(t, n, useNATS, false, specs...)
}

func startClusterOn(t testing.TB, n int, useNATS, tcp bool, specs ...kvstore.TableSpec) *cluster {
	t.Helper()
	c := &cluster{t: t, tcp: tcp}
	if useNATS {
		srv, err := bus.StartEmbedded(bus.EmbeddedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.srv = srv
	} else {
		c.mem = transport.NewMem()
	}
	t.Cleanup(c.close)
	for i := 0; i < n; i++ {
		c.hosts = append(c.hosts, fmt.Sprintf("s%d", i))
	}
	var placements []kvstore.Placement
	for _, s := range specs {
		placements = append(placements, kvstore.Placement{Spec: s, Hosts: c.hosts})
	}
	for _, h := range c.hosts {
		s, err := kvstore.NewServer(c.conn(), h, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTables("task", h, placements); err != nil {
			t.Fatal(err)
		}
		c.servers = append(c.servers, s)
	}
	return c
}

func subject(slave string) string { return "test.slave." + slave + ".kv" }

// conn is a transport endpoint: a new NATS connection, or the shared
// in-memory transport.
func (c *cluster) conn() transport.Transport {
	if c.srv == nil {
		return c.mem
	}
	nc, err := c.srv.Connect(bus.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.conns = append(c.conns, nc)
	if !c.tcp {
		return transport.NewNATS(nc, subject)
	}
	self := fmt.Sprintf("c%d", len(c.tcps)-len(c.hosts))
	if len(c.tcps) < len(c.hosts) {
		self = c.hosts[len(c.tcps)] // the servers connect first
	}
	tr, err := transport.NewTCP(transport.NewNATS(nc, subject), transport.TCPConfig{Self: self,
		Hello: func(node string) string { return "kvt.hello." + node }, Log: zerolog.Nop()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.tcps = append(c.tcps, tr)
	return tr
}

func (c *cluster) close() {
	for _, s := range c.servers {
		s.Close()
	}
	for _, tr := range c.tcps {
		tr.Close()
	}
	for _, nc := range c.conns {
		nc.Close()
	}
	if c.srv != nil {
		c.srv.Shutdown()
	}
}

func (c *cluster) prepare(stage int32, cons kvstore.Consistency, workers int) {
	for _, s := range c.servers {
		if err := s.PrepareStage("task", stage, cons, workers); err != nil {
			c.t.Fatal(err)
		}
	}
}

// client opens a worker's client living on slave self (-1: on no slave).
func (c *cluster) client(self int, stage, worker int32, cons kvstore.Consistency) *kvstore.Client {
	cfg := kvstore.ClientConfig{Transport: c.conn(), Task: "task", Stage: stage, Worker: worker,
		Hosts: c.hosts, Consistency: cons, Timeout: 10 * time.Second, Ctx: context.Background()}
	if self >= 0 {
		cfg.Self, cfg.Server = c.hosts[self], c.servers[self]
	}
	cl, err := kvstore.NewClient(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

func (c *cluster) table(cl *kvstore.Client, spec kvstore.TableSpec) *kvstore.TableClient {
	tc, err := cl.Table(kvstore.Placement{Spec: spec, Hosts: c.hosts})
	if err != nil {
		c.t.Fatal(err)
	}
	return tc
}

var asp = kvstore.Consistency{Kind: kvstore.ASP}

func TestClientGetAddRoundTrip(t *testing.T) {
	for _, spec := range []kvstore.TableSpec{
		{Name: "dense64", Size: 1000, Width: 3},
		{Name: "dense32", Size: 1000, Width: 1, DType: kvstore.Float32},
		{Name: "sparse", Size: 1 << 40, Width: 2, Storage: kvstore.Sparse, Partition: kvstore.HashPartition},
		{Name: "hash", Size: 999, Width: 1, Partition: kvstore.HashPartition, ChunkSize: 10},
	} {
		t.Run(spec.Name, func(t *testing.T) {
			spec = spec.WithDefaults()
			c := newCluster(t, 3, spec)
			for _, self := range []int{-1, 0, 2} {
				tc := c.table(c.client(self, 0, 0, asp), spec)
				keys := []uint64{spec.Size - 1, 0, 7, 500, 7}
				w := spec.Width
				deltas := make([]float64, len(keys)*w)
				for i := range deltas {
					deltas[i] = float64(i%7) + 0.5
				}
				before := make([]float64, len(keys)*w)
				if err := tc.Get(keys, before); err != nil {
					t.Fatal(err)
				}
				if err := tc.Add(keys, deltas); err != nil {
					t.Fatal(err)
				}
				after := make([]float64, len(keys)*w)
				if err := tc.Get(keys, after); err != nil {
					t.Fatal(err)
				}
				// Key 7 appears twice: both adds land.
				want := make(map[uint64][]float64)
				for i, k := range keys {
					if want[k] == nil {
						want[k] = append([]float64(nil), before[i*w:(i+1)*w]...)
					}
					for j := 0; j < w; j++ {
						want[k][j] += deltas[i*w+j]
					}
				}
				for i, k := range keys {
					for j := 0; j < w; j++ {
						if got := after[i*w+j]; got != want[k][j] {
							t.Fatalf("self %d key %d col %d: got %v want %v", self, k, j, got, want[k][j])
						}
					}
				}
			}
		})
	}
}

func TestClientConcurrentAddsExact(t *testing.T) {
	spec := kvstore.TableSpec{Name: "w", Size: 64, Width: 1}.WithDefaults()
	c := newCluster(t, 2, spec)
	const workers, rounds = 6, 300
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		cl := c.client(w%3-1, 0, int32(w), asp)
		tc := c.table(cl, spec)
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := make([]uint64, spec.Size)
			ones := make([]float64, spec.Size)
			for i := range keys {
				keys[i], ones[i] = uint64(i), 0.25
			}
			for r := 0; r < rounds; r++ {
				if err := tc.Add(keys, ones); err != nil {
					t.Error(err)
					return
				}
			}
			if err := cl.Flush(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	tc := c.table(c.client(-1, 0, -1, asp), spec)
	got := make([]float64, spec.Size)
	if err := tc.GetRange(0, int(spec.Size), got); err != nil {
		t.Fatal(err)
	}
	for k, v := range got {
		if v != workers*rounds*0.25 {
			t.Fatalf("key %d: %v, want %v", k, v, workers*rounds*0.25)
		}
	}
}

func TestClientChunksAndRanges(t *testing.T) {
	spec := kvstore.TableSpec{Name: "w", Size: 1003, Width: 2, ChunkSize: 100}.WithDefaults()
	c := newCluster(t, 3, spec)
	tc := c.table(c.client(1, 0, 0, asp), spec)
	chunks := []uint64{10, 0, 5} // chunk 10 is the short last one
	n, err := tc.ChunkValues(chunks)
	if err != nil || n != (3+100+100)*2 {
		t.Fatalf("ChunkValues = %d, %v", n, err)
	}
	deltas := make([]float64, n)
	for i := range deltas {
		deltas[i] = float64(i)
	}
	if err := tc.AddChunk(chunks, deltas); err != nil {
		t.Fatal(err)
	}
	got := make([]float64, n)
	if err := tc.GetChunk(chunks, got); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != deltas[i] {
			t.Fatalf("value %d: %v want %v", i, got[i], deltas[i])
		}
	}
	// Chunk 5 is keys 500..599: check through the keyed path.
	v := make([]float64, 2)
	if err := tc.Get([]uint64{550}, v); err != nil {
		t.Fatal(err)
	}
	if want := float64((3+100+50)*2) + 0; v[0] != want {
		t.Fatalf("key 550 = %v, want %v", v[0], want)
	}
	if err := tc.GetChunk([]uint64{11}, got[:2]); err == nil {
		t.Fatal("chunk out of range: no error")
	}
	if err := tc.Get([]uint64{1003}, v); err == nil {
		t.Fatal("key out of range: no error")
	}
}

func TestClientLargeMessagesSplit(t *testing.T) {
	// 300k keys x 8 bytes is well over the 1 MiB max payload.
	spec := kvstore.TableSpec{Name: "w", Size: 300000, Width: 1}.WithDefaults()
	c := newCluster(t, 2, spec)
	tc := c.table(c.client(-1, 0, 0, asp), spec)
	keys := make([]uint64, spec.Size)
	vals := make([]float64, spec.Size)
	for i := range keys {
		keys[i], vals[i] = uint64(i), float64(i)
	}
	if err := tc.Add(keys, vals); err != nil {
		t.Fatal(err)
	}
	got := make([]float64, spec.Size)
	if err := tc.Get(keys, got); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != vals[i] {
			t.Fatalf("key %d: %v", i, got[i])
		}
	}
}

func TestClientBSPAcrossServers(t *testing.T) {
	spec := kvstore.TableSpec{Name: "w", Size: 10, Width: 1}.WithDefaults()
	c := newCluster(t, 2, spec)
	bsp := kvstore.Consistency{Kind: kvstore.BSP}
	c.prepare(0, bsp, 2)
	fast := c.client(0, 0, 0, bsp)
	slow := c.client(1, 0, 1, bsp)
	ft, st := c.table(fast, spec), c.table(slow, spec)
	keys := []uint64{0, 9} // one key on each server
	out := make([]float64, 2)
	// Both at clock 0: reads go through.
	if err := ft.Get(keys, out); err != nil {
		t.Fatal(err)
	}
	if err := ft.Add(keys, []float64{1, 1}); err != nil {
		t.Fatal(err)
	}
	if err := fast.Clock(); err != nil {
		t.Fatal(err)
	}
	// fast is at clock 1; its read must wait for slow to finish clock 0.
	done := make(chan []float64)
	go func() {
		o := make([]float64, 2)
		if err := ft.Get(keys, o); err != nil {
			t.Error(err)
		}
		done <- o
	}()
	select {
	case <-done:
		t.Fatal("BSP read at clock 1 did not wait for the slow worker")
	case <-time.After(100 * time.Millisecond):
	}
	if err := st.Add(keys, []float64{10, 10}); err != nil {
		t.Fatal(err)
	}
	if err := slow.Clock(); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-done:
		if o[0] != 11 || o[1] != 11 {
			t.Fatalf("read after the barrier saw %v, want both workers' adds [11 11]", o)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("BSP read never released")
	}
	if err := fast.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := slow.Finish(); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkClientGetRemote(b *testing.B) {
	spec := kvstore.TableSpec{Name: "w", Size: 100000, Width: 1, DType: kvstore.Float32}.WithDefaults()
	c := newNATSCluster(b, 2, spec)
	tc := c.table(c.client(0, 0, 0, asp), spec)
	keys := make([]uint64, 1000)
	for i := range keys {
		keys[i] = uint64(i * 100)
	}
	out := make([]float64, len(keys))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := tc.Get(keys, out); err != nil {
			b.Fatal(err)
		}
		if err := tc.Add(keys, out); err != nil {
			b.Fatal(err)
		}
	}
}

func TestClientNamesAGoneSlave(t *testing.T) {
	spec := kvstore.TableSpec{Name: "w", Size: 10}.WithDefaults()
	for _, useNATS := range []bool{false, true} {
		for _, op := range []string{"get", "add"} {
			t.Run(fmt.Sprintf("nats=%v/%s", useNATS, op), func(t *testing.T) {
				c := startCluster(t, 2, useNATS, spec)
				cl := c.client(0, 0, 0, asp)
				tc := c.table(cl, spec)
				c.servers[1].Close() // slave s1 stops serving
				var err error
				if op == "get" {
					err = tc.Get([]uint64{9}, make([]float64, 1))
				} else if err = tc.Add([]uint64{9}, []float64{1}); err == nil {
					err = cl.Flush()
				}
				if err == nil || !strings.Contains(err.Error(), "slave s1 died or left") {
					t.Fatalf("err = %v", err)
				}
			})
		}
	}
}
