package kvstore_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/kvstore"
)

// The in-memory path of a dynamic table: batches of keys this slave owns
// (home keys that stayed, guests, both) are read and written without a
// message; only the keys owned elsewhere travel. Checked on a small dense
// table (ownership bitset, dense guest store) and on a huge sparse one
// (ownership maps, sparse guest store), under ASP (one hold of the move
// lock) and SSP (the gated path).
func TestOwnedBatchesStayInMemory(t *testing.T) {
	ssp := kvstore.Consistency{Kind: kvstore.SSP, Staleness: 3}
	for _, tc := range []struct {
		name string
		spec kvstore.TableSpec
		cons kvstore.Consistency
	}{
		{"dense asp", kvstore.TableSpec{Name: "w", Size: 40, Width: 3}, asp},
		{"dense ssp", kvstore.TableSpec{Name: "w", Size: 40, Width: 3, Relocate: true}, ssp},
		{"sparse huge asp", kvstore.TableSpec{Name: "w", Size: 1 << 40, Width: 3, Storage: kvstore.Sparse}, asp},
		{"sparse huge hash ssp", kvstore.TableSpec{Name: "w", Size: 1 << 40, Width: 3, Storage: kvstore.Sparse, Partition: kvstore.HashPartition, Relocate: true}, ssp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec.WithDefaults()
			c := startCluster(t, 2, false, spec)
			if tc.cons.Kind != kvstore.ASP {
				c.prepare(0, tc.cons, 2)
			}
			c0, c1 := c.client(0, 0, 0, tc.cons), c.client(1, 0, 1, tc.cons)
			w0, w1 := c.table(c0, spec), c.table(c1, spec)
			// Keys homed on slave 0 (H), and on slave 1 (of which G moves
			// to slave 0 and R stays).
			var home0, home1 []uint64
			for _, k := range []uint64{0, 1, 2, 3, 4, 5, 20, 21, 22, 23, 24, 25, 36, 37, 38, 39, 1<<40 - 1, 1<<40 - 2, 1<<40 - 3, 1<<40 - 4} {
				if k >= spec.Size {
					continue
				}
				if w0.Local(k) {
					home0 = append(home0, k)
				} else {
					home1 = append(home1, k)
				}
			}
			if len(home0) < 3 || len(home1) < 4 {
				t.Fatalf("test keys split %v / %v", home0, home1)
			}
			h, g, r := home0[:3], home1[:len(home1)-2], home1[len(home1)-2:]
			all := append(append(append([]uint64{}, h...), g...), r...)
			row := func(k uint64, v float64) []float64 { return []float64{v, v * float64(k%7+1), -v} }
			want := map[uint64]float64{}
			add := func(w *kvstore.TableClient, cl *kvstore.Client, keys []uint64, v float64) {
				t.Helper()
				vals := make([]float64, 0, 3*len(keys))
				for _, k := range keys {
					vals = append(vals, row(k, v)...)
					want[k] += v
				}
				ok(t, w.Add(keys, vals))
				ok(t, cl.Flush())
			}
			add(w1, c1, all, 1)
			ok(t, w0.Localize(g))
			for _, k := range g {
				same(t, true, w0.Owned(k), "key %d owned by slave 0", k)
			}
			check := func(keys []uint64, remote int) {
				t.Helper()
				// Shuffled, so the stores' rows are scattered back to
				// their positions.
				keys = append([]uint64(nil), keys...)
				rand.New(rand.NewPCG(uint64(len(keys)), 1)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
				before := c0.Stats()
				got := make([]float64, 3*len(keys))
				ok(t, w0.Get(keys, got))
				for i, k := range keys {
					same(t, row(k, want[k]), got[3*i:3*i+3], "key %d in batch %v", k, keys)
				}
				add(w0, c0, keys, 2)
				after := c0.Stats()
				same(t, int64(2*remote), after.RemoteKeys-before.RemoteKeys, "remote keys of a Get and an Add of %v", keys)
				same(t, int64(2*(len(keys)-remote)), after.LocalKeys-before.LocalKeys, "keys served in memory of %v", keys)
				if remote == 0 {
					same(t, before.Requests, after.Requests, "messages for an owned batch %v", keys)
				}
			}
			check(h, 0)
			check(g, 0)
			check(append(append([]uint64{}, h...), g...), 0)
			check(all, len(r))
			// The other slave sees every write.
			got := make([]float64, 3*len(all))
			ok(t, w1.Get(all, got))
			for i, k := range all {
				same(t, row(k, want[k]), got[3*i:3*i+3], "key %d read by slave 1", k)
			}
		})
	}
}

// A read gated by SSP waits with the move lock released; a key it was
// going to read in memory moves away meanwhile (after another worker's
// Add reached it). The read goes to the key's home instead, which
// forwards it to the new owner, and returns the value with that Add.
func TestGatedReadOfAKeyThatMovesAway(t *testing.T) {
	spec := kvstore.TableSpec{Name: "w", Size: 20, Width: 2, Relocate: true}.WithDefaults()
	cons := kvstore.Consistency{Kind: kvstore.SSP, Staleness: 0}
	c := startCluster(t, 2, false, spec)
	c.prepare(0, cons, 2)
	c0, c1 := c.client(0, 0, 0, cons), c.client(1, 0, 1, cons)
	w0, w1 := c.table(c0, spec), c.table(c1, spec)
	const k, other = 2, 15 // homes: slave 0 and slave 1
	// Make the table dynamic on slave 0 (a key moves in), so reads of k
	// take the live path.
	ok(t, w0.Localize([]uint64{other}))
	ok(t, w0.Add([]uint64{k}, []float64{1, 10}))
	ok(t, c0.Clock()) // worker 0 at clock 1, worker 1 at 0: a read must wait
	gate := c.servers[0].Gate("task", 0)
	_, waits0, _ := gate.Stats(0)
	got := make([]float64, 2)
	done := make(chan error, 1)
	go func() { done <- w0.Get([]uint64{k}, got) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, waits, _ := gate.Stats(0); waits > waits0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("worker 0's read never waited at the gate")
		}
	}
	ok(t, w1.Add([]uint64{k}, []float64{100, 1000}))
	ok(t, w1.Localize([]uint64{k}))
	same(t, false, w0.Owned(k), "key %d still on slave 0", k)
	// An Add in slave 1's memory, which slave 0's stale row lacks.
	ok(t, w1.Add([]uint64{k}, []float64{1000, 10000}))
	fwd := ownership(t, c, 0).Forwarded
	ok(t, c1.Clock())
	ok(t, <-done)
	same(t, []float64{1101, 11010}, got, "key %d read after it left", k)
	if ownership(t, c, 0).Forwarded <= fwd {
		t.Fatal("the read was not sent to the key's home after the key left")
	}
}

// Workers on two slaves train on batches of several keys (Gets checked
// row by row, Adds of known values) while each of them keeps localizing
// random key sets, so keys leave a slave while its other worker reads or
// writes them in memory. Under ASP and SSP, on the in-memory transport and
// NATS: no read is older than what its worker saw or wrote, every row is
// whole (its three columns from the same Adds), and every key ends with
// exactly the sum of its Adds.
func TestOwnedBatchesWhileKeysMove(t *testing.T) {
	for _, tc := range []struct {
		cons    kvstore.Consistency
		useNATS bool
	}{
		{asp, false},
		{kvstore.Consistency{Kind: kvstore.SSP, Staleness: 4}, false},
		{asp, true},
	} {
		t.Run(fmt.Sprintf("%s nats=%v", tc.cons.Kind, tc.useNATS), func(t *testing.T) {
			spec := kvstore.TableSpec{Name: "w", Size: 48, Width: 3, Relocate: tc.cons.Kind != kvstore.ASP}.WithDefaults()
			const slaves, perSlave, ops = 2, 2, 600
			c := startCluster(t, slaves, tc.useNATS, spec)
			if tc.cons.Kind != kvstore.ASP {
				c.prepare(0, tc.cons, slaves*perSlave)
			}
			mine := make([][]float64, slaves*perSlave)
			var wg sync.WaitGroup
			for w := range slaves * perSlave {
				cl := c.client(w%slaves, 0, int32(w), tc.cons)
				tab := c.table(cl, spec)
				mine[w] = make([]float64, spec.Size)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := hammer(tab, cl, w, ops, mine[w]); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			got := scanAll(t, c, spec)
			for k := range spec.Size {
				var sum float64
				for w := range mine {
					sum += mine[w][k]
				}
				if v := got[k]; len(v) != 3 || v[0] != sum || v[1] != sum*float64(k%5+1) || v[2] != -sum {
					t.Fatalf("key %d = %v, want %v", k, v, []float64{sum, sum * float64(k%5+1), -sum})
				}
			}
			guests := 0
			for i := range slaves {
				guests += ownership(t, c, i).Guests
			}
			if guests == 0 {
				t.Fatal("no key is a guest anywhere: the test moved nothing")
			}
		})
	}
}

// hammer is one worker of TestOwnedBatchesWhileKeysMove.
func hammer(tab *kvstore.TableClient, cl *kvstore.Client, w, ops int, mine []float64) error {
	rng := rand.New(rand.NewPCG(uint64(w), 11))
	size := int(tab.Spec().Size)
	seen := make([]float64, size)
	for i := range ops {
		keys := make([]uint64, 1+rng.IntN(12))
		for j, k := range rng.Perm(size)[:len(keys)] {
			keys[j] = uint64(k)
		}
		switch {
		case i%25 == 0:
			if err := tab.Localize(keys[:min(len(keys), 6)]); err != nil {
				return err
			}
		case i%3 == 0:
			got := make([]float64, 3*len(keys))
			if err := tab.Get(keys, got); err != nil {
				return err
			}
			for j, k := range keys {
				v := got[3*j : 3*j+3]
				if v[1] != v[0]*float64(k%5+1) || v[2] != -v[0] {
					return fmt.Errorf("worker %d: key %d read as %v: not one row's Adds", w, k, v)
				}
				if v[0] < mine[k] || v[0] < seen[k] {
					return fmt.Errorf("worker %d: key %d read %v after adding %v and reading %v", w, k, v[0], mine[k], seen[k])
				}
				seen[k] = v[0]
			}
		default:
			val := float64(w + 1)
			vals := make([]float64, 0, 3*len(keys))
			for _, k := range keys {
				vals = append(vals, val, val*float64(k%5+1), -val)
				mine[k] += val
			}
			if err := tab.Add(keys, vals); err != nil {
				return err
			}
		}
		if err := cl.Clock(); err != nil {
			return err
		}
	}
	if err := cl.Finish(); err != nil {
		return err
	}
	return cl.Flush()
}

// A key leaves the slave while a worker of the slave is between finding
// it owned and reading or adding it in memory (the hook runs at that
// moment and asks another slave to localize the key): the move waits for
// the worker, so the read returns the value before the move and the Add
// travels with the key, never into a row left behind.
func TestKeyMovesAwayWhileAWorkerUsesIt(t *testing.T) {
	for _, op := range []kvstore.Op{kvstore.OpGet, kvstore.OpAdd} {
		t.Run(op.String(), func(t *testing.T) {
			spec := kvstore.TableSpec{Name: "w", Size: 20, Width: 2}.WithDefaults()
			c := startCluster(t, 2, false, spec)
			c0, c1 := c.client(0, 0, 0, asp), c.client(1, 0, 1, asp)
			w0, w1 := c.table(c0, spec), c.table(c1, spec)
			const k, other = 3, 14 // homes: slave 0 and slave 1
			ok(t, w0.Localize([]uint64{other}))
			ok(t, w0.Add([]uint64{k}, []float64{1, 2}))
			moved := make(chan error, 1)
			hooked := false
			restore := kvstore.SetTestHookOwned(func(o kvstore.Op) {
				if o != op || hooked {
					return
				}
				hooked = true
				go func() { moved <- w1.Localize([]uint64{k}) }()
				// Give the move every chance to run now if the lock
				// did not hold it back.
				time.Sleep(50 * time.Millisecond)
				select {
				case err := <-moved:
					t.Errorf("the key moved away while worker 0 used it in memory (localize err %v)", err)
					moved <- nil
				default:
				}
			})
			got := make([]float64, 2)
			if op == kvstore.OpGet {
				ok(t, w0.Get([]uint64{k}, got))
				same(t, []float64{1, 2}, got, "key %d read as it moved", k)
			} else {
				ok(t, w0.Add([]uint64{k}, []float64{10, 20}))
			}
			restore()
			ok(t, <-moved)
			same(t, true, hooked, "the hook ran")
			same(t, true, w1.Owned(k), "key %d on slave 1", k)
			ok(t, w1.Get([]uint64{k}, got))
			want := []float64{1, 2}
			if op == kvstore.OpAdd {
				want = []float64{11, 22}
			}
			same(t, want, got, "key %d after the move", k)
		})
	}
}
