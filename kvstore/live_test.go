package kvstore_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/flexps/flexps/kvstore"
)

func ownership(t *testing.T, c *cluster, node int) kvstore.OwnershipStats {
	t.Helper()
	for _, st := range c.servers[node].OwnershipStats("task") {
		if st.Table == "w" {
			return st
		}
	}
	t.Fatalf("no ownership stats on %s", c.hosts[node])
	return kvstore.OwnershipStats{}
}

// scanAll reads the whole table by scanning every shard, as the output
// writer does, and checks every key is found exactly once.
func scanAll(t *testing.T, c *cluster, spec kvstore.TableSpec) map[uint64][]float64 {
	t.Helper()
	tc := c.table(c.client(-1, 0, -1, asp), spec)
	got := map[uint64][]float64{}
	err := tc.Scan(func(keys []uint64, vals []float64) error {
		for i, k := range keys {
			if _, dup := got[k]; dup {
				return fmt.Errorf("key %d scanned twice", k)
			}
			got[k] = append([]float64(nil), vals[i*spec.Width:(i+1)*spec.Width]...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestLocalizeMovesKeysAndEveryoneFindsThem(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nats    bool
		storage kvstore.Storage
		part    kvstore.Partition
	}{
		{"mem dense range", false, kvstore.Dense, kvstore.RangePartition},
		{"mem sparse hash", false, kvstore.Sparse, kvstore.HashPartition},
		{"nats dense range", true, kvstore.Dense, kvstore.RangePartition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := kvstore.TableSpec{Name: "w", Size: 30, Width: 2, Storage: tc.storage, Partition: tc.part}.WithDefaults()
			c := startCluster(t, 3, tc.nats, spec)
			c0, c1, c2 := c.client(0, 0, 0, asp), c.client(1, 0, 1, asp), c.client(2, 0, 2, asp)
			w0, w1, w2 := c.table(c0, spec), c.table(c1, spec), c.table(c2, spec)
			all := make([]uint64, spec.Size)
			ones := make([]float64, 2*spec.Size)
			for i := range all {
				all[i] = uint64(i)
				ones[2*i], ones[2*i+1] = float64(i), 1
			}
			ok(t, w0.Add(all, ones))
			// Worker 2 pulls three keys to its slave (ones that live on
			// slave 0 or 1 under either partitioning, and one of its own).
			var moved []uint64
			for _, k := range []uint64{0, 1, 3, 4, 29} {
				if !w2.Local(k) {
					moved = append(moved, k)
				}
			}
			ok(t, w2.Localize(append(moved, 29)))
			st := ownership(t, c, 2)
			same(t, len(moved), st.Guests, "slave 2's guests")
			for _, k := range moved {
				same(t, true, w2.Owned(k), "key %d owned by slave 2", k)
			}
			// Adds and reads from every slave reach the keys where they are.
			ok(t, w1.Add(moved, make2(len(moved), 10)))
			ok(t, w0.Add(moved, make2(len(moved), 100)))
			ok(t, c0.Flush())
			ok(t, c1.Flush())
			for _, w := range []*kvstore.TableClient{w0, w1, w2} {
				got := make([]float64, 2*len(moved))
				ok(t, w.Get(moved, got))
				for i, k := range moved {
					same(t, []float64{float64(k) + 110, 111}, got[2*i:2*i+2], "key %d", k)
				}
			}
			// Worker 0 learned where the moved keys live: its next reads go
			// straight to slave 2, no home forwards them.
			forwarded := func() (n int64) {
				for i := range c.servers {
					n += ownership(t, c, i).Forwarded
				}
				return n
			}
			before := forwarded()
			got0 := make([]float64, 2*len(moved))
			ok(t, w0.Get(moved, got0))
			same(t, before, forwarded(), "forwards after worker 0 learned the owners")
			// Move one on again: slave 1 takes it from slave 2 (three messages).
			ok(t, w1.Localize(moved[:1]))
			same(t, true, w1.Owned(moved[0]), "key %d owned by slave 1", moved[0])
			same(t, false, w2.Owned(moved[0]), "key %d left slave 2", moved[0])
			ok(t, w2.Add(moved[:1], make2(1, 1000)))
			ok(t, c2.Flush())
			got := make([]float64, 2)
			ok(t, w1.Get(moved[:1], got))
			same(t, []float64{float64(moved[0]) + 1110, 1111}, got, "key %d after its second move", moved[0])
			// Ranges and the output scan see one value per key.
			rg := make([]float64, 2*spec.Size)
			ok(t, w0.GetRange(0, int(spec.Size), rg))
			scanned := scanAll(t, c, spec)
			same(t, int(spec.Size), len(scanned), "keys scanned")
			for k := range all {
				if rg[2*k] != scanned[uint64(k)][0] || rg[2*k+1] != scanned[uint64(k)][1] {
					t.Fatalf("key %d: range %v, scan %v", k, rg[2*k:2*k+2], scanned[uint64(k)])
				}
			}
		})
	}
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func same[T any](t *testing.T, want, got T, format string, args ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%s: want %v, got %v", fmt.Sprintf(format, args...), want, got)
	}
}

func make2(n int, v float64) []float64 {
	out := make([]float64, 2*n)
	for i := range out {
		out[i] = v
	}
	return out
}

// The stress test of Lapse's repository, ported: workers on every slave
// hammer the table with Adds of known values, read keys back (a worker's
// read never misses its own earlier Adds), and every so often localize a
// random key set, synchronously or not. At the end every key holds exactly
// the sum of its Adds.
func TestLocalizeStressExactSums(t *testing.T) {
	for _, useNATS := range []bool{false, true} {
		t.Run(fmt.Sprintf("nats=%v", useNATS), func(t *testing.T) {
			spec := kvstore.TableSpec{Name: "w", Size: 64, Width: 1}.WithDefaults()
			const slaves, perSlave, ops = 3, 2, 1500
			c := startCluster(t, slaves, useNATS, spec)
			want := make([][]float64, slaves*perSlave)
			var wg sync.WaitGroup
			for w := range slaves * perSlave {
				cl := c.client(w%slaves, 0, int32(w), asp)
				tab := c.table(cl, spec)
				want[w] = make([]float64, spec.Size)
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					mine := want[w]
					for i := range ops {
						k := uint64(rng.IntN(int(spec.Size)))
						switch {
						case i%97 == 0:
							keys := make([]uint64, 1+rng.IntN(8))
							for j := range keys {
								keys[j] = uint64(rng.IntN(int(spec.Size)))
							}
							var err error
							if rng.IntN(2) == 0 {
								err = tab.Localize(keys)
							} else {
								_, err = tab.LocalizeAsync(keys)
							}
							if err != nil {
								t.Error(err)
								return
							}
						case i%5 == 0:
							got := make([]float64, 1)
							if err := tab.Get([]uint64{k}, got); err != nil {
								t.Error(err)
								return
							}
							if got[0] < mine[k] {
								t.Errorf("worker %d read key %d = %v after adding %v itself", w, k, got[0], mine[k])
								return
							}
						default:
							v := float64(w + 1)
							if err := tab.Add([]uint64{k}, []float64{v}); err != nil {
								t.Error(err)
								return
							}
							mine[k] += v
						}
					}
					if err := cl.Flush(); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			got := scanAll(t, c, spec)
			moved := 0
			for i := range slaves {
				moved += ownership(t, c, i).Guests
			}
			for k := range spec.Size {
				var sum float64
				for w := range want {
					sum += want[w][k]
				}
				if v := got[k]; len(v) != 1 || v[0] != sum {
					t.Fatalf("key %d = %v, want %v", k, v, sum)
				}
			}
			if moved == 0 {
				t.Fatal("no key is a guest anywhere: the test moved nothing")
			}
		})
	}
}

// GetAsync reads overlap other operations: two reads in flight at once, an
// Add and a synchronous Get between issuing and waiting; every value lands
// in its own buffer, static and after keys moved. GetNext reads the same.
func TestGetAsyncOverlapsOtherOperations(t *testing.T) {
	for _, useNATS := range []bool{false, true} {
		t.Run(fmt.Sprintf("nats=%v", useNATS), func(t *testing.T) {
			spec := kvstore.TableSpec{Name: "w", Size: 40, Width: 2}.WithDefaults()
			c := startCluster(t, 2, useNATS, spec)
			cl := c.client(0, 0, 0, asp)
			w := c.table(cl, spec)
			all := make([]uint64, spec.Size)
			vals := make([]float64, 2*spec.Size)
			for i := range all {
				all[i] = uint64(i)
				vals[2*i], vals[2*i+1] = float64(i), -float64(i)
			}
			ok(t, w.Add(all, vals))
			ok(t, cl.Flush())
			check := func(keys []uint64, got []float64, plus float64) {
				t.Helper()
				for i, k := range keys {
					if got[2*i] != float64(k)+plus || got[2*i+1] != -float64(k)+plus {
						t.Fatalf("key %d: %v, want %v", k, got[2*i:2*i+2], []float64{float64(k) + plus, -float64(k) + plus})
					}
				}
			}
			for round := range 2 {
				if round == 1 {
					// Move half of slave 1's keys to slave 0: the reads
					// now take the dynamic path.
					ok(t, w.Localize([]uint64{21, 23, 25, 27}))
				}
				a, b := []uint64{1, 22, 35, 3}, []uint64{39, 21, 0, 27, 25}
				outA, outB := make([]float64, 2*len(a)), make([]float64, 2*len(b))
				pa, err := w.GetAsync(a, outA)
				ok(t, err)
				pb, err := w.GetAsync(b, outB)
				ok(t, err)
				mid := make([]float64, 4)
				ok(t, w.Get([]uint64{30, 2}, mid))
				check([]uint64{30, 2}, mid, float64(round))
				ok(t, pb.Wait())
				ok(t, pa.Wait())
				check(a, outA, float64(round))
				check(b, outB, float64(round))
				ok(t, pa.Wait()) // a second Wait is harmless
				// GetNext reads at Wait on the dynamic path.
				c := []uint64{21, 2, 38}
				outC := make([]float64, 2*len(c))
				pc, err := w.GetNext(c, outC)
				ok(t, err)
				ok(t, cl.Clock())
				ok(t, pc.Wait())
				check(c, outC, float64(round))
				// One more to every key for the next round.
				ones := make([]float64, 2*spec.Size)
				for i := range ones {
					ones[i] = 1
				}
				ok(t, w.Add(all, ones))
				ok(t, cl.Flush())
			}
		})
	}
}
