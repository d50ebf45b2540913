package kvstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"pgregory.net/rapid"
)

// rig is shard servers for cache tests on the in-memory transport (or on
// an embedded NATS server, for benchmarks comparable with a cluster);
// tasks (and their tables and gates) come and go on it so property runs
// can share one.
type rig struct {
	t       testing.TB
	srv     *bus.Embedded // nil on the in-memory transport
	mem     *transport.Mem
	conns   []*nats.Conn
	servers []*Server
	hosts   []string
}

func rigSubject(slave string) string { return "cachetest.slave." + slave + ".kv" }

func newRig(t testing.TB, shards int) *rig { return startRig(t, shards, false) }

// newNATSRig is a rig whose servers and clients each have their own NATS
// connection, as slaves in separate processes would.
func newNATSRig(t testing.TB, shards int) *rig { return startRig(t, shards, true) }

func startRig(t testing.TB, shards int, useNATS bool) *rig {
	t.Helper()
	r := &rig{t: t}
	if useNATS {
		srv, err := bus.StartEmbedded(bus.EmbeddedOptions{})
		noErr(t, err)
		r.srv = srv
	} else {
		r.mem = transport.NewMem()
	}
	t.Cleanup(r.close)
	for i := range shards {
		h := fmt.Sprintf("s%d", i)
		s, err := NewServer(r.conn(), h, zerolog.Nop())
		noErr(t, err)
		r.hosts = append(r.hosts, h)
		r.servers = append(r.servers, s)
	}
	return r
}

// conn is a transport endpoint: a new NATS connection, or the shared
// in-memory transport.
func (r *rig) conn() transport.Transport {
	if r.srv == nil {
		return r.mem
	}
	nc, err := r.srv.Connect(bus.Options{})
	noErr(r.t, err)
	r.conns = append(r.conns, nc)
	return transport.NewNATS(nc, rigSubject)
}

func (r *rig) close() {
	for _, s := range r.servers {
		s.Close()
	}
	for _, nc := range r.conns {
		nc.Close()
	}
	if r.srv != nil {
		r.srv.Shutdown()
	}
}

// task creates task's tables and the gate of its stage 0.
func (r *rig) task(task string, cons Consistency, workers int, specs ...TableSpec) []Placement {
	var ps []Placement
	for _, s := range specs {
		ps = append(ps, Placement{Spec: s, Hosts: r.hosts})
	}
	for i, s := range r.servers {
		noErr(r.t, s.CreateTables(task, r.hosts[i], ps))
		noErr(r.t, s.PrepareStage(task, 0, cons, workers))
	}
	return ps
}

func (r *rig) drop(task string) {
	for _, s := range r.servers {
		s.DropTask(task, nil)
	}
}

// client opens worker's client on nc, living on slave self (-1: none).
// The caller closes it.
func (r *rig) client(tr transport.Transport, task string, self int, worker int32, cons Consistency) *Client {
	cfg := ClientConfig{Transport: tr, Task: task, Worker: worker, Hosts: r.hosts,
		Consistency: cons, Timeout: 30 * time.Second, Ctx: context.Background()}
	if self >= 0 {
		cfg.Self, cfg.Server = r.hosts[self], r.servers[self]
	}
	cl, err := NewClient(cfg)
	noErr(r.t, err)
	return cl
}

func (r *rig) cached(cl *Client, p Placement, kind CacheKind, capacity int) *CachedTable {
	tc, err := cl.Table(p)
	noErr(r.t, err)
	ct, err := NewCachedTable(tc, kind, capacity)
	noErr(r.t, err)
	return ct
}

// oneCachedWorker starts a rig of two slaves and the only worker of a
// task under cons, off both slaves, with an 8-key LRU cache on its
// table "w" (10 keys; keys 0..4 on one slave, 5..9 on the other). The
// caller closes the client (Finish).
func oneCachedWorker(t *testing.T, task string, cons Consistency) (*Client, *CachedTable) {
	r := newRig(t, 2)
	ps := r.task(task, cons, 1, TableSpec{Name: "w", Size: 10}.WithDefaults())
	cl := r.client(r.conn(), task, -1, 0, cons)
	t.Cleanup(cl.Close)
	return cl, r.cached(cl, ps[0], CacheLRU, 8)
}

func TestNewCachedTableRejects(t *testing.T) {
	r := newRig(t, 2)
	spec := TableSpec{Name: "w", Size: 10}.WithDefaults()
	ssp := Consistency{Kind: SSP, Staleness: 1}
	for _, tc := range []struct {
		name     string
		cons     Consistency
		kind     CacheKind
		capacity int
		ok       bool
	}{
		{"lru", ssp, CacheLRU, 4, true},
		{"lfu", ssp, CacheLFU, 1, true},
		{"none without capacity", ssp, CacheNone, 0, true},
		{"empty kind is none", ssp, "", 0, true},
		{"lru without capacity", ssp, CacheLRU, 0, false},
		{"lfu negative capacity", ssp, CacheLFU, -3, false},
		{"unknown kind", ssp, "arc", 4, false},
		{"sparse ssp", Consistency{Kind: SparseSSP, Staleness: 1, Speculation: 1}, CacheLRU, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := "rej-" + tc.name
			ps := r.task(task, tc.cons, 1, spec)
			defer r.drop(task)
			cl := r.client(r.conn(), task, -1, 0, tc.cons)
			defer cl.Close()
			tbl, err := cl.Table(ps[0])
			noErr(t, err)
			_, err = NewCachedTable(tbl, tc.kind, tc.capacity)
			if tc.ok {
				noErr(t, err)
			} else {
				isErr(t, err, ErrBadCache)
			}
		})
	}
	_, err := NewCachedTable(nil, CacheLRU, 1)
	isErr(t, err, ErrBadCache)
}

// cachedKeys lists the keys a core holds in eviction order, first out
// first (LRU only).
func cachedKeys(c *cacheCore) []uint64 {
	var ks []uint64
	s := int32(c.cap)
	for i := c.prev[s]; i != s; i = c.prev[i] {
		ks = append(ks, c.keys[i])
	}
	return ks
}

func TestCacheCoreLRUOrder(t *testing.T) {
	c := newCacheCore(CacheLRU, 3, 2)
	for _, k := range []uint64{10, 20, 30} {
		c.insert(k)
	}
	equal(t, []uint64{10, 20, 30}, cachedKeys(c))
	c.touch(c.lookup(10))
	equal(t, []uint64{20, 30, 10}, cachedKeys(c))
	c.insert(40) // evicts 20
	equal(t, -1, c.lookup(20))
	c.touch(c.lookup(30))
	c.insert(50) // evicts 10
	equal(t, -1, c.lookup(10))
	equal(t, []uint64{40, 30, 50}, cachedKeys(c))
	equal(t, int64(2), c.evictions)
	equal(t, 3, c.n)
	c.purge()
	equal(t, -1, c.lookup(30))
	equal(t, 0, len(cachedKeys(c)))
}

func TestCacheCoreLFUOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cap     int
		ops     []string // "+k" insert, "k" touch
		evicted []uint64 // in order
	}{
		{"least frequent goes", 3, []string{"+1", "+2", "+3", "1", "1", "3", "+4", "+5"}, []uint64{2, 4}},
		{"ties: least recent goes", 2, []string{"+1", "+2", "+3"}, []uint64{1}},
		{"ties among equals after touches", 3, []string{"+1", "+2", "+3", "2", "1", "3", "+4", "+5"}, []uint64{2, 4}},
		{"hot key survives a scan", 2, []string{"+1", "1", "1", "+2", "+3", "+4", "+5"}, []uint64{2, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCacheCore(CacheLFU, tc.cap, 1)
			var evicted []uint64
			for _, op := range tc.ops {
				var k uint64
				if op[0] == '+' {
					fmt.Sscan(op[1:], &k)
					before := slices.Clone(c.keys[:c.n])
					c.insert(k)
					for _, b := range before {
						if c.lookup(b) < 0 {
							evicted = append(evicted, b)
						}
					}
				} else {
					fmt.Sscan(op, &k)
					s := c.lookup(k)
					must(t, s >= 0, "key %d not cached", k)
					c.touch(s)
				}
			}
			equal(t, tc.evicted, evicted)
			equal(t, int64(len(tc.evicted)), c.evictions)
		})
	}
}

func TestCacheCoreLFUAging(t *testing.T) {
	// Key 1 was hot long ago, key 2 is hot now: aging lets 1 go first,
	// where plain LFU (1 read 200 times, 2 read 100) would keep it.
	c := newCacheCore(CacheLFU, 2, 1)
	c.insert(1)
	for range 200 {
		c.touch(c.lookup(1))
	}
	c.insert(2)
	for range 100 {
		c.touch(c.lookup(2))
	}
	c.insert(3)
	equal(t, -1, c.lookup(1))
	check(t, c.lookup(2) >= 0, "the currently hot key was evicted")
	check(t, int(c.freq[c.lookup(2)]) <= lfuMaxFreq)
}

// TestCacheCoreModel checks the core against a plain model: LRU order
// exactly; for both kinds, that the index and lists agree and stay within
// capacity.
func TestCacheCoreModel(t *testing.T) {
	for _, kind := range []CacheKind{CacheLRU, CacheLFU} {
		t.Run(string(kind), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				capacity := rapid.IntRange(1, 12).Draw(rt, "cap")
				c := newCacheCore(kind, capacity, 1)
				if rapid.Bool().Draw(rt, "presence bits") {
					c.track(41)
				}
				var lru []uint64 // least recent first
				ops := rapid.IntRange(1, 300).Draw(rt, "ops")
				for range ops {
					k := rapid.Uint64Range(0, 40).Draw(rt, "key")
					if rapid.IntRange(0, 9).Draw(rt, "purge") == 0 {
						c.purge()
						lru = lru[:0]
						continue
					}
					at := slices.Index(lru, k)
					s := c.lookup(k)
					if (s >= 0) != (at >= 0) && kind == CacheLRU {
						rt.Fatalf("key %d: cached %v, model %v", k, s >= 0, at >= 0)
					}
					if s >= 0 {
						if c.keys[s] != k {
							rt.Fatalf("key %d found in slot of %d", k, c.keys[s])
						}
						c.touch(s)
					} else {
						s = c.insert(k)
						c.row(s)[0] = float64(k)
					}
					if at >= 0 {
						lru = slices.Delete(lru, at, at+1)
					} else if len(lru) == capacity {
						lru = lru[1:]
					}
					lru = append(lru, k)
					if kind == CacheLRU && !slices.Equal(lru, cachedKeys(c)) {
						rt.Fatalf("order %v, model %v", cachedKeys(c), lru)
					}
					// Every slot in use is indexed and linked exactly once.
					if c.n > capacity {
						rt.Fatalf("%d keys cached, capacity %d", c.n, capacity)
					}
					linked := 0
					for l := c.cap; l < len(c.next); l++ {
						for i := c.next[l]; i != int32(l); i = c.next[i] {
							linked++
						}
					}
					if linked != c.n {
						rt.Fatalf("%d slots linked, %d in use", linked, c.n)
					}
					for i := range c.n {
						if got := c.lookup(c.keys[i]); got != i || c.row(i)[0] != float64(c.keys[i]) {
							rt.Fatalf("slot %d (key %d): lookup %d, value %v", i, c.keys[i], got, c.row(i)[0])
						}
					}
				}
			})
		})
	}
}

// cacheHits counts hits over the staleness property's runs, so the test
// can tell it exercised the cache at all.
var cacheHits, cacheStale, cacheBypassed, cacheRefreshed int64

// TestCacheStalenessProperty runs 2-3 workers with process caches under
// SSP(s) against 2 shards, interleaving Get, Add and Clock at random.
// Worker k's j-th Add to a key adds 2^j (bits unique per key), so a read
// value says exactly which Adds it includes. Every value a cached Get
// returns must include every Add made at a clock <= c-s-1 by anyone and
// every Add the reader made itself. Reads are issued only when the gate
// lets them through, so the run is sequential.
func TestCacheStalenessProperty(t *testing.T) {
	r := newRig(t, 2)
	conns := []transport.Transport{r.conn(), r.conn(), r.conn(), r.conn()}
	run := 0
	cacheHits, cacheStale, cacheBypassed, cacheRefreshed = 0, 0, 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		task := fmt.Sprintf("prop%d", run)
		const size = 12
		s := rapid.IntRange(0, 3).Draw(rt, "s")
		cons := Consistency{Kind: SSP, Staleness: s}
		if s == 0 && rapid.Bool().Draw(rt, "bsp") {
			cons = Consistency{Kind: BSP}
		}
		n := rapid.IntRange(2, 3).Draw(rt, "workers")
		kind := rapid.SampledFrom([]CacheKind{CacheLRU, CacheLFU}).Draw(rt, "kind")
		capacity := rapid.IntRange(1, size).Draw(rt, "capacity")
		spec := TableSpec{Name: "w", Size: size, Partition: rapid.SampledFrom([]Partition{RangePartition, HashPartition}).Draw(rt, "partition")}.WithDefaults()
		ps := r.task(task, cons, n, spec)
		defer r.drop(task)

		type add struct {
			worker int
			clock  int64
			bit    uint
			seq    int // order among all Adds
		}
		// A worker's GetNext not yet waited for: the read of its next
		// iteration, made at clock; seq is the Adds made before it.
		type next struct {
			p     Pending
			keys  []uint64
			out   []float64
			clock int64
			seq   int
		}
		var (
			cls    = make([]*Client, n)
			tbls   = make([]*CachedTable, n)
			clocks = make([]int64, n)
			adds   = make([][]add, size) // per key
			// lastGet is each worker's last read if its keys were
			// distinct: an Add of exactly those keys (a training step)
			// takes CachedTable's path that reuses the read's slots.
			lastGet = make([][]uint64, n)
			nexts   = make([]*next, n)
			seq     = 0
		)
		// check verifies a read of worker w for the iteration at clock c:
		// it holds every Add of another worker's clock <= c-s-1, every
		// Add of w's own made before the read (own before seq), and no
		// Add never made.
		check := func(what string, w int, c int64, own int, keys []uint64, out []float64) {
			for i, k := range keys {
				v := out[i]
				if v < 0 || v >= 1<<52 || v != math.Trunc(v) {
					rt.Fatalf("%s: worker %d key %d: value %v is no sum of adds", what, w, k, v)
				}
				got := uint64(v)
				var issued uint64
				for _, a := range adds[k] {
					issued |= 1 << a.bit
					need := (a.worker == w && a.seq < own) || (a.worker != w && a.clock <= c-int64(s)-1)
					if need && got&(1<<a.bit) == 0 {
						rt.Fatalf("%s: worker %d at clock %d (s=%d) read key %d = %b without the add of worker %d at clock %d (bit %d)",
							what, w, c, s, k, got, a.worker, a.clock, a.bit)
					}
				}
				if got&^issued != 0 {
					rt.Fatalf("%s: worker %d key %d = %b holds adds never made (%b)", what, w, k, got, issued)
				}
			}
		}
		// waitNexts waits for every GetNext whose worker clocked since
		// and whose read the gate lets through (all: moving the slowest
		// workers on until it does).
		waitNexts := func(all bool) {
			for w, nx := range nexts {
				for nx != nil {
					slowest := slices.Min(clocks)
					if clocks[w] > nx.clock && clocks[w]-int64(s) <= slowest {
						if err := nx.p.Wait(); err != nil {
							rt.Fatal(err)
						}
						check("GetNext", w, nx.clock+1, nx.seq, nx.keys, nx.out)
						nexts[w] = nil
						break
					}
					if !all {
						break
					}
					v := w
					if clocks[w] <= nx.clock {
						// Wait before the Clock is refused.
						if err := nx.p.Wait(); err == nil {
							rt.Fatal("Wait on a GetNext before the Clock succeeded")
						}
					} else {
						v = slices.Index(clocks, slowest)
					}
					if err := cls[v].Clock(); err != nil {
						rt.Fatal(err)
					}
					clocks[v]++
				}
			}
		}
		for w := range n {
			self := rapid.IntRange(-1, 1).Draw(rt, "self")
			cls[w] = r.client(conns[w], task, self, int32(w), cons)
			defer cls[w].Close()
			tbls[w] = r.cached(cls[w], ps[0], kind, capacity)
			// A governor with short windows and random iteration times
			// switches between the cache and the table at random: no
			// switch may let a value miss an Add it must hold.
			window := rapid.IntRange(0, 3).Draw(rt, "window")
			tbls[w].gov = newCacheGovernor(window, rapid.IntRange(0, 8).Draw(rt, "max run"))
			tick := time.Unix(0, 0)
			tbls[w].now = func() time.Time {
				tick = tick.Add(time.Duration(rapid.IntRange(0, 100).Draw(rt, "iteration ns")))
				return tick
			}
		}
		steps := rapid.IntRange(1, 50).Draw(rt, "steps")
		for range steps {
			w := rapid.IntRange(0, n-1).Draw(rt, "worker")
			op := rapid.SampledFrom([]string{"get", "get", "add", "clock", "next"}).Draw(rt, "op")
			slowest := slices.Min(clocks)
			if op == "get" && clocks[w]-int64(s) > slowest {
				// The gate would hold this read: move the slowest on instead.
				w, op = slices.Index(clocks, slowest), "clock"
			}
			switch op {
			case "get":
				keys := rapid.SliceOfN(rapid.Uint64Range(0, size-1), 1, 6).Draw(rt, "keys")
				lastGet[w] = nil
				if d := slices.Clone(keys); len(slices.Compact(slices.Sorted(slices.Values(d)))) == len(keys) {
					lastGet[w] = keys
				}
				out := make([]float64, len(keys))
				what := "Get"
				if rapid.Bool().Draw(rt, "async") {
					what = "GetAsync"
					p, err := tbls[w].GetAsync(keys, out)
					if err == nil {
						err = p.Wait()
					}
					if err != nil {
						rt.Fatal(err)
					}
				} else if err := tbls[w].Get(keys, out); err != nil {
					rt.Fatal(err)
				}
				check(what, w, clocks[w], seq, keys, out)
			case "next":
				if nexts[w] != nil {
					break
				}
				keys := rapid.SliceOfN(rapid.Uint64Range(0, size-1), 1, 6).Draw(rt, "keys")
				out := make([]float64, len(keys))
				p, err := tbls[w].GetNext(keys, out)
				if err != nil {
					rt.Fatal(err)
				}
				nexts[w] = &next{p: p, keys: keys, out: out, clock: clocks[w], seq: seq}
			case "add":
				keys := rapid.SliceOfNDistinct(rapid.Uint64Range(0, size-1), 1, 4, rapid.ID).Draw(rt, "keys")
				if lastGet[w] != nil && rapid.Bool().Draw(rt, "step") {
					keys = slices.Clone(lastGet[w])
				}
				keys = slices.DeleteFunc(keys, func(k uint64) bool { return len(adds[k]) >= 52 })
				deltas := make([]float64, len(keys))
				for i, k := range keys {
					b := uint(len(adds[k]))
					adds[k] = append(adds[k], add{worker: w, clock: clocks[w], bit: b, seq: seq})
					deltas[i] = float64(uint64(1) << b)
					seq++
				}
				if err := tbls[w].Add(keys, deltas); err != nil {
					rt.Fatal(err)
				}
			case "clock":
				if err := cls[w].Clock(); err != nil {
					rt.Fatal(err)
				}
				clocks[w]++
			}
			waitNexts(false)
		}
		waitNexts(true)
		for w := range n {
			if err := cls[w].Finish(); err != nil {
				rt.Fatal(err)
			}
			st := tbls[w].Stats()
			cacheHits += st.Hits
			cacheStale += st.Stale
			cacheBypassed += st.Bypassed
			cacheRefreshed += st.Refreshed
		}
		// Every Add landed exactly once.
		dump := r.client(conns[n], task, -1, -1, cons)
		defer dump.Close()
		tc, err := dump.Table(ps[0])
		if err != nil {
			rt.Fatal(err)
		}
		all := make([]float64, size)
		if err := tc.GetRange(0, size, all); err != nil {
			rt.Fatal(err)
		}
		for k, v := range all {
			if want := float64(uint64(1)<<len(adds[k]) - 1); v != want {
				rt.Fatalf("key %d ends at %v, want %v", k, v, want)
			}
		}
	})
	check(t, cacheHits > 0, "no read was ever served from a cache")
	check(t, cacheStale > 0, "no cached value was ever too old")
	check(t, cacheBypassed > 0, "no read ever went straight to the table")
	check(t, cacheRefreshed > 0, "no cached key was ever refreshed ahead")
	t.Logf("hits %d, stale %d, bypassed %d, refreshed ahead %d", cacheHits, cacheStale, cacheBypassed, cacheRefreshed)
}

func TestCacheBSPNeverAcrossClock(t *testing.T) {
	r := newRig(t, 2)
	bsp := Consistency{Kind: BSP}
	spec := TableSpec{Name: "w", Size: 10}.WithDefaults()
	ps := r.task("bsp", bsp, 2, spec)
	a, b := r.client(r.conn(), "bsp", -1, 0, bsp), r.client(r.conn(), "bsp", -1, 1, bsp)
	defer a.Close()
	defer b.Close()
	ta, tb := r.cached(a, ps[0], CacheLRU, 8), r.cached(b, ps[0], CacheLFU, 8)
	keys := []uint64{0, 9} // one key per shard
	out := make([]float64, 2)
	for clock := range 4 {
		noErr(t, ta.Get(keys, out))
		equal(t, []float64{float64(11 * clock), float64(11 * clock)}, out, "clock %d: first read sees both workers' earlier adds", clock)
		noErr(t, ta.Get(keys, out)) // same clock: served from the cache
		noErr(t, ta.Add(keys, []float64{1, 1}))
		noErr(t, ta.Get(keys, out)) // own add applied to the cache
		equal(t, []float64{float64(11*clock + 1), float64(11*clock + 1)}, out, "clock %d: read after own add", clock)
		noErr(t, tb.Add(keys, []float64{10, 10}))
		noErr(t, a.Clock())
		noErr(t, b.Clock())
	}
	st := ta.Stats()
	equal(t, CacheStats{Hits: 16, Misses: 8, Stale: 6}, st)
	noErr(t, a.Finish())
	noErr(t, b.Finish())
}

func TestCacheSSPServesWithinBound(t *testing.T) {
	cl, tc := oneCachedWorker(t, "ssp", Consistency{Kind: SSP, Staleness: 2})
	keys := []uint64{1, 8}
	out := make([]float64, 2)
	// Fetched at clock 0 with stamp 0: good through clock 2, stale at 3.
	var hits []int64
	for range 5 {
		noErr(t, tc.Get(keys, out))
		hits = append(hits, tc.Stats().Hits)
		noErr(t, cl.Clock())
	}
	equal(t, []int64{0, 2, 4, 4, 6}, hits)
	equal(t, int64(2), tc.Stats().Stale)
	noErr(t, cl.Finish())
}

// A read that goes to the shards refreshes, in the same messages, the
// cached keys it does not ask for that could not serve the next clock,
// while the cache has never been full (it holds the worker's whole remote
// working set): a worker reading two alternating batches under SSP(2)
// then sends messages at clocks 0, 1, 4 and 7, where it sent them at
// 0, 1, 4, 5, 8 and 9 (each batch fetched alone went stale one clock
// before the other). A full cache (its doorkeeper turns the fourth key
// away), a read with a key never cached (a working set still growing),
// and BSP refresh nothing.
func TestCacheRefreshesItsWorkingSetAhead(t *testing.T) {
	alternate := func(c int) []uint64 { return [][]uint64{{1, 8}, {2, 9}}[c%2] } // one key per shard each
	for _, tc := range []struct {
		name      string
		cons      Consistency
		capacity  int
		batch     func(clock int) []uint64
		msgClocks []int // clocks whose read sent messages (nil: not checked)
		refreshed int64
	}{
		{"ssp(2), the working set fits", Consistency{Kind: SSP, Staleness: 2}, 8, alternate, []int{0, 1, 4, 7}, 4},
		{"ssp(2), a full cache", Consistency{Kind: SSP, Staleness: 2}, 3, alternate, nil, 0},
		{"ssp(2), a new key every read", Consistency{Kind: SSP, Staleness: 2}, 10, func(c int) []uint64 { return []uint64{uint64(c)} }, nil, 0},
		{"bsp", Consistency{Kind: BSP}, 8, alternate, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 2)
			ps := r.task("ahead", tc.cons, 1, TableSpec{Name: "w", Size: 10}.WithDefaults())
			cl := r.client(r.conn(), "ahead", -1, 0, tc.cons)
			t.Cleanup(cl.Close)
			ct := r.cached(cl, ps[0], CacheLRU, tc.capacity)
			ct.gov = newCacheGovernor(0, 0) // always through the cache
			var sent []int
			adds := map[uint64]float64{}
			for c := range 10 {
				keys := tc.batch(c)
				out := make([]float64, len(keys))
				before := cl.Stats().Requests
				noErr(t, ct.Get(keys, out))
				for i, k := range keys {
					equal(t, adds[k], out[i], "clock %d key %d: the worker's own adds", c, k)
					adds[k]++
				}
				if cl.Stats().Requests > before {
					sent = append(sent, c)
				}
				noErr(t, ct.Add(keys, slices.Repeat([]float64{1}, len(keys))))
				noErr(t, cl.Clock())
			}
			if tc.msgClocks != nil {
				equal(t, tc.msgClocks, sent, "clocks whose read sent messages")
			}
			equal(t, tc.refreshed, ct.Stats().Refreshed, "keys refreshed ahead")
			noErr(t, cl.Finish())
		})
	}
}

// A read refreshes at most maxAheadPerKey cached keys ahead per remote
// key it reads, all or none: n keys read one per clock, all stale three
// clocks later, then key 0 read again would refresh the n-1 others.
func TestCacheRefreshAheadIsBounded(t *testing.T) {
	for _, tc := range []struct {
		keys      int
		refreshed int64
	}{
		{maxAheadPerKey + 1, maxAheadPerKey},
		{maxAheadPerKey + 2, 0},
	} {
		t.Run(fmt.Sprint(tc.keys, " keys"), func(t *testing.T) {
			r := newRig(t, 2)
			cons := Consistency{Kind: SSP, Staleness: 2}
			ps := r.task("bounded", cons, 1, TableSpec{Name: "w", Size: 64}.WithDefaults())
			cl := r.client(r.conn(), "bounded", -1, 0, cons)
			t.Cleanup(cl.Close)
			ct := r.cached(cl, ps[0], CacheLRU, 64)
			ct.gov = newCacheGovernor(0, 0) // always through the cache
			out := make([]float64, 1)
			for k := range tc.keys {
				noErr(t, ct.Get([]uint64{uint64(k)}, out))
				noErr(t, cl.Clock())
			}
			for range 3 {
				noErr(t, cl.Clock())
			}
			noErr(t, ct.Get([]uint64{0}, out))
			equal(t, tc.refreshed, ct.Stats().Refreshed, "keys refreshed ahead")
			noErr(t, cl.Finish())
		})
	}
}

func TestCacheASPAndReadYourWrites(t *testing.T) {
	r := newRig(t, 2)
	spec := TableSpec{Name: "w", Size: 100, Width: 2, DType: Float32, ChunkSize: 10}.WithDefaults()
	aspc := Consistency{Kind: ASP}
	ps := r.task("asp", aspc, 1, spec)
	cl := r.client(r.conn(), "asp", -1, 0, aspc)
	defer cl.Close()
	plain := r.client(r.conn(), "asp", -1, -1, aspc)
	defer plain.Close()
	ref, err := plain.Table(ps[0])
	noErr(t, err)
	tc := r.cached(cl, ps[0], CacheLFU, 16)
	keys := []uint64{3, 97, 55}
	out, want := make([]float64, 6), make([]float64, 6)
	noErr(t, tc.Get(keys, out))
	for i := range aspCacheClocks - 1 { // still fresh afterwards: hits apply own adds
		d := []float64{0.1, -0.3, 1e-3, 7, float64(i) / 3, 0.7}
		noErr(t, tc.Add(keys, d))
		noErr(t, cl.Clock())
	}
	// Chunk 5 is keys 50..59: key 55 is its sixth.
	cd := make([]float64, 20)
	cd[10], cd[11] = 2.5, -2.5
	noErr(t, tc.AddChunk([]uint64{5}, cd))
	noErr(t, cl.Flush())
	noErr(t, tc.Get(keys, out))
	noErr(t, ref.Get(keys, want))
	equal(t, want, out, "cache with own adds, rounded as float32, equals the shards")
	equal(t, CacheStats{Hits: 3, Misses: 3}, tc.Stats())
	// After ASPCacheClocks more iterations the entries are refetched.
	for range aspCacheClocks + 1 {
		noErr(t, cl.Clock())
	}
	noErr(t, tc.Get(keys, out))
	equal(t, CacheStats{Hits: 3, Misses: 6, Stale: 3}, tc.Stats())
	noErr(t, tc.GetChunk([]uint64{5}, cd)) // passes through
	equal(t, want[4:6], cd[10:12])
}

// While the governor sends reads past the cache, Get and GetAsync go to
// the table as they would without a cache (GetAsync returns while the
// read travels), Adds leave the cache alone, and the reads are counted.
func TestCacheReadsPastTheCache(t *testing.T) {
	cl, tc := oneCachedWorker(t, "past", Consistency{Kind: SSP, Staleness: 1})
	keys := []uint64{1, 7}
	noErr(t, tc.Add(keys, []float64{1, 2}))
	out := make([]float64, 2)
	noErr(t, tc.Get(keys, out)) // through the cache: fills it
	equal(t, []float64{1, 2}, out)
	equal(t, 2, tc.Len())
	// The table won the last measurement: a long stretch past the cache.
	tc.gov = cacheGovernor{window: 1, maxRun: 1 << 20, phase: govRun, left: 1 << 20, run: 1 << 20, cached: false}
	noErr(t, tc.Add(keys, []float64{10, 20}))
	noErr(t, tc.Get(keys, out))
	equal(t, []float64{11, 22}, out)
	p, err := tc.GetAsync(keys, out)
	noErr(t, err)
	if _, done := p.(Done); done {
		t.Fatal("a read past the cache was done before GetAsync returned")
	}
	noErr(t, p.Wait())
	equal(t, []float64{11, 22}, out)
	// A read ahead past the cache is the table's own: it travels while
	// the worker computes, and is waited for after the Clock.
	p, err = tc.GetNext(keys, out)
	noErr(t, err)
	if _, own := p.(*aheadRead); !own {
		t.Fatalf("a read ahead past the cache is a %T, not the table's own", p)
	}
	if err := p.Wait(); !errors.Is(err, errWaitBeforeClock) {
		t.Fatalf("Wait before the Clock: %v", err)
	}
	noErr(t, cl.Clock())
	noErr(t, p.Wait())
	equal(t, []float64{11, 22}, out)
	st := tc.Stats()
	equal(t, CacheStats{Misses: 2, Bypassed: 3}, st)
	equal(t, 1.0, tc.core.row(int(tc.core.lookup(1)))[0], "an Add past the cache leaves its copy alone")
	noErr(t, cl.Finish())
}

// A read ahead through the cache is a cached Get made at Wait, after the
// Clock: hits and stamps are judged at the iteration that uses them, and
// the worker's Adds made in between are in the values.
func TestCacheGetNextThroughTheCache(t *testing.T) {
	cl, tc := oneCachedWorker(t, "next", Consistency{Kind: SSP, Staleness: 1})
	tc.gov = newCacheGovernor(0, 0) // always through the cache
	keys := []uint64{2, 8}
	out := make([]float64, 2)
	noErr(t, tc.Get(keys, out)) // cached at clock 0, stamp 0: fresh through clock 1
	for clock := range 3 {
		p, err := tc.GetNext(keys, out)
		noErr(t, err)
		if err := p.Wait(); !errors.Is(err, errWaitBeforeClock) {
			t.Fatalf("clock %d: Wait before the Clock: %v", clock, err)
		}
		noErr(t, tc.Add(keys, []float64{1, 10}))
		noErr(t, cl.Clock())
		noErr(t, p.Wait())
		equal(t, []float64{float64(clock + 1), float64(10 * (clock + 1))}, out, "clock %d: the read ahead holds the Add made after GetNext", clock)
		noErr(t, p.Wait()) // again: the same answer
	}
	// Clock 1 hit, clock 2 stale (refetched at 2 with stamp 2), clock 3 hit.
	equal(t, CacheStats{Hits: 4, Misses: 4, Stale: 2}, tc.Stats())
	noErr(t, cl.Finish())
}

// GetAsync through the cache returns at once with a read that travels
// unless every key is cached fresh; its values do not fill the cache.
func TestCacheGetAsyncThroughTheCache(t *testing.T) {
	cl, tc := oneCachedWorker(t, "async", Consistency{Kind: SSP, Staleness: 1})
	tc.gov = newCacheGovernor(0, 0) // always through the cache
	noErr(t, tc.Add([]uint64{3, 6}, []float64{1, 2}))
	out := make([]float64, 2)
	p, err := tc.GetAsync([]uint64{3, 6}, out)
	noErr(t, err)
	if _, done := p.(Done); done {
		t.Fatal("a read with misses was done before GetAsync returned")
	}
	noErr(t, p.Wait())
	equal(t, []float64{1, 2}, out)
	equal(t, 0, tc.Len(), "a read that travelled filled the cache")
	noErr(t, tc.Get([]uint64{3}, out[:1])) // caches key 3
	noErr(t, tc.Add([]uint64{3}, []float64{10}))
	p, err = tc.GetAsync([]uint64{3}, out[:1])
	noErr(t, err)
	if _, done := p.(Done); !done {
		t.Fatalf("a read of fresh cached keys travelled (%T)", p)
	}
	equal(t, 11.0, out[0], "the hit holds the worker's own Add")
	equal(t, CacheStats{Hits: 1, Misses: 1, Bypassed: 1}, tc.Stats())
	noErr(t, cl.Finish())
}

func TestCacheSkipsLocalKeys(t *testing.T) {
	r := newRig(t, 2)
	ssp := Consistency{Kind: SSP, Staleness: 1}
	spec := TableSpec{Name: "w", Size: 10}.WithDefaults() // shard 0: keys 0..4
	ps := r.task("local", ssp, 1, spec)
	cl := r.client(r.conn(), "local", 0, 0, ssp)
	defer cl.Close()
	tc := r.cached(cl, ps[0], CacheLRU, 8)
	out := make([]float64, 3)
	for range 3 {
		noErr(t, tc.Get([]uint64{1, 2, 7}, out))
	}
	equal(t, 1, tc.Len())
	equal(t, CacheStats{Hits: 2, Misses: 1}, tc.Stats())
	noErr(t, cl.Finish())
}

func TestCacheGetHitAllocatesNothing(t *testing.T) {
	r := newRig(t, 2)
	ssp := Consistency{Kind: SSP, Staleness: 1}
	spec := TableSpec{Name: "w", Size: 1000, Width: 4}.WithDefaults()
	ps := r.task("alloc", ssp, 1, spec)
	cl := r.client(r.conn(), "alloc", -1, 0, ssp)
	defer cl.Close()
	for _, kind := range []CacheKind{CacheLRU, CacheLFU} {
		tc := r.cached(cl, ps[0], kind, 64)
		tc.gov = newCacheGovernor(0, 0) // every read through the cache
		keys := []uint64{1, 500, 999, 3, 1}
		out := make([]float64, len(keys)*4)
		noErr(t, tc.Get(keys, out))
		allocs := testing.AllocsPerRun(100, func() { noErr(t, tc.Get(keys, out)) })
		equal(t, 0.0, allocs, "%s: allocations per cached Get", kind)
	}
	noErr(t, cl.Finish())
}

// BenchmarkCachedGetZipf is one worker's training loop under SSP(2)
// against 2 remote shards: Get batch Zipf(1.1) keys, Add to them, and
// Clock every perClock batches; without a cache (the baseline, run first)
// and with LRU and LFU caches of 1% of the table. The keys are drawn from
// the whole table, or (hot=N) from its N most popular keys only, a shape
// where every key of a read may be fresh in the cache, so that its
// messages are not sent. It reports the hit rate (of the reads through
// the cache), the share of reads its governor sent past it, and the
// speedup over the baseline of the same shape.
func BenchmarkCachedGetZipf(b *testing.B) {
	const size = 1 << 17
	r := newNATSRig(b, 2)
	ssp := Consistency{Kind: SSP, Staleness: 2}
	spec := TableSpec{Name: "w", Size: size, DType: Float32}.WithDefaults()
	base := map[string]float64{}
	for _, shape := range []struct{ batch, perClock, hot int }{{10, 1, 0}, {10, 10, 0}, {100, 1, 0}, {100, 10, 0}, {10, 10, 256}} {
		for _, kind := range []CacheKind{CacheNone, CacheLRU, CacheLFU} {
			name := fmt.Sprintf("batch=%d/perclock=%d", shape.batch, shape.perClock)
			if shape.hot > 0 {
				name += fmt.Sprintf("/hot=%d", shape.hot)
			}
			b.Run(name+"/"+string(kind), func(b *testing.B) {
				task := fmt.Sprintf("zipf-%d-%d-%d-%s", shape.batch, shape.perClock, shape.hot, kind)
				ps := r.task(task, ssp, 1, spec)
				defer r.drop(task)
				cl := r.client(r.conn(), task, -1, 0, ssp)
				defer cl.Close()
				tc := r.cached(cl, ps[0], kind, size/100)
				space := uint64(size - 1)
				if shape.hot > 0 {
					space = uint64(shape.hot - 1)
				}
				z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, space)
				keys := make([]uint64, shape.batch)
				vals := make([]float64, shape.batch)
				n := 0
				for b.Loop() {
					for i := range keys {
						keys[i] = (z.Uint64() * 0x9E3779B1) & (size - 1) // spread hot ranks over both shards
					}
					if err := tc.Get(keys, vals); err != nil {
						b.Fatal(err)
					}
					for i := range vals {
						vals[i] = 1e-3
					}
					if err := tc.Add(keys, vals); err != nil {
						b.Fatal(err)
					}
					if n++; n%shape.perClock == 0 {
						if err := cl.Clock(); err != nil {
							b.Fatal(err)
						}
					}
				}
				perOp := float64(b.Elapsed().Nanoseconds()) / float64(n)
				noErr(b, cl.Finish())
				b.ReportMetric(100*tc.Stats().HitRate(), "hit%")
				b.ReportMetric(100*float64(tc.Stats().Bypassed)/float64(n), "past%")
				b.ReportMetric(float64(cl.Stats().Requests)/float64(n), "msgs/op")
				if kind == CacheNone {
					base[name] = perOp
				} else if base[name] > 0 {
					b.ReportMetric(base[name]/perOp, "speedup")
				}
			})
		}
	}
}

// BenchmarkCachedGetHit is the cache's own cost: a Get of 100 remote keys
// all served from the cache.
func BenchmarkCachedGetHit(b *testing.B) {
	r := newNATSRig(b, 2)
	ssp := Consistency{Kind: SSP, Staleness: 2}
	spec := TableSpec{Name: "w", Size: 1 << 17, DType: Float32}.WithDefaults()
	for _, kind := range []CacheKind{CacheLRU, CacheLFU} {
		b.Run(string(kind), func(b *testing.B) {
			task := "hit-" + string(kind)
			ps := r.task(task, ssp, 1, spec)
			defer r.drop(task)
			cl := r.client(r.conn(), task, -1, 0, ssp)
			defer cl.Close()
			tc := r.cached(cl, ps[0], kind, 1024)
			keys := make([]uint64, 100)
			for i := range keys {
				keys[i] = uint64(i * 1311)
			}
			vals := make([]float64, len(keys))
			noErr(b, tc.Get(keys, vals))
			b.ReportAllocs()
			for b.Loop() {
				if err := tc.Get(keys, vals); err != nil {
					b.Fatal(err)
				}
			}
			must(b, tc.Stats().Misses == int64(len(keys)), "misses after the first read")
			noErr(b, cl.Finish())
		})
	}
}

// A full cache admits a missed key only on its second miss, so a tail of
// keys read once does not evict hot ones; a cache with room admits all.
func TestCacheCoreAdmission(t *testing.T) {
	c := newCacheCore(CacheLRU, 2, 1)
	check(t, c.admit(1), "a cache with room admits")
	c.insert(1)
	c.insert(2)
	check(t, !c.admit(10), "first miss of 10 in a full cache")
	check(t, !c.admit(11), "first miss of 11")
	check(t, c.admit(10), "second miss of 10")
	c.purge()
	c.insert(1)
	c.insert(2)
	check(t, !c.admit(10), "purge forgets the misses")
	// The window ages: after many other misses, 10 counts as new again.
	for k := uint64(100); k < 100+uint64(len(c.seen))*64; k++ {
		c.admit(k)
	}
	check(t, c.seenN < len(c.seen)*16, "the doorkeeper was cleared")
}
