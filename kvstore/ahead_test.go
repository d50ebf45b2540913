package kvstore_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/kvstore"
)

// waitDone runs p.Wait in a goroutine; the channel gets its error.
func waitDone(p kvstore.Pending) chan error {
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	return done
}

func blocked(t *testing.T, done chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) before the bound allowed it", what, err)
	case <-time.After(100 * time.Millisecond):
	}
}

func released(t *testing.T, done chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		ok(t, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s never returned", what)
	}
}

// TestGetNextStaysWithinTheBound: a read issued before Clock for the next
// iteration is gated at the next clock, on the remote shard (parked there)
// and on the local one (read at Wait): under BSP it sees the slow worker's
// iteration, under SSP(1) a read two clocks ahead of the slowest waits
// where GetAsync, gated at the clock it was issued in, would not. Wait
// before the Clock is an error, not a hang.
func TestGetNextStaysWithinTheBound(t *testing.T) {
	for _, useNATS := range []bool{false, true} {
		t.Run(fmt.Sprintf("nats=%v", useNATS), func(t *testing.T) {
			spec := kvstore.TableSpec{Name: "w", Size: 10, Width: 1}.WithDefaults()
			keys := []uint64{0, 9} // key 0 on s0 (fast's slave), key 9 on s1
			// Two workers of stage 0: fast on s0, slow on s1.
			workers := func(cons kvstore.Consistency) (fast, slow *kvstore.Client, ft, st *kvstore.TableClient) {
				c := startCluster(t, 2, useNATS, spec)
				c.prepare(0, cons, 2)
				fast, slow = c.client(0, 0, 0, cons), c.client(1, 0, 1, cons)
				return fast, slow, c.table(fast, spec), c.table(slow, spec)
			}
			t.Run("bsp", func(t *testing.T) {
				fast, slow, ft, st := workers(kvstore.Consistency{Kind: kvstore.BSP})
				out := make([]float64, 2)
				p, err := ft.GetNext(keys, out)
				ok(t, err)
				if err := p.Wait(); err == nil || !strings.Contains(err.Error(), "before the Clock") {
					t.Fatalf("Wait before Clock: %v, want an error saying so", err)
				}
				ok(t, ft.Add(keys, []float64{1, 1}))
				ok(t, fast.Clock())
				done := waitDone(p)
				blocked(t, done, "a BSP GetNext with the other worker at clock 0")
				ok(t, st.Add(keys, []float64{10, 10}))
				ok(t, slow.Clock())
				released(t, done, "GetNext after the slow worker's Clock")
				if out[0] != 11 || out[1] != 11 {
					t.Fatalf("read %v, want both workers' first iteration [11 11]", out)
				}
				ok(t, p.Wait()) // a second Wait is harmless
				ok(t, fast.Finish())
				ok(t, slow.Finish())
			})
			t.Run("ssp1", func(t *testing.T) {
				fast, slow, ft, st := workers(kvstore.Consistency{Kind: kvstore.SSP, Staleness: 1})
				out := make([]float64, 2)
				// Clock 0, for clock 1: one ahead of the slowest is allowed.
				p, err := ft.GetNext(keys, out)
				ok(t, err)
				ok(t, fast.Clock())
				released(t, waitDone(p), "GetNext one clock ahead under SSP(1)")
				// Clock 1: GetAsync (gated at 1) goes through, GetNext
				// (gated at 2) waits for the slow worker's Clock.
				async := make([]float64, 2)
				pa, err := ft.GetAsync(keys, async)
				ok(t, err)
				released(t, waitDone(pa), "GetAsync at clock 1 under SSP(1)")
				p, err = ft.GetNext(keys, out)
				ok(t, err)
				ok(t, fast.Clock())
				done := waitDone(p)
				blocked(t, done, "GetNext for clock 2 with the slowest at 0")
				ok(t, st.Add(keys, []float64{5, 5}))
				ok(t, slow.Clock())
				released(t, done, "GetNext after the slow worker's Clock")
				if out[0] != 5 || out[1] != 5 {
					t.Fatalf("read %v, want the slow worker's iteration 0 [5 5]", out)
				}
				ok(t, fast.Finish())
				ok(t, slow.Finish())
			})
		})
	}
}

// TestGetNextValues: GetNext reads what Get reads after the Clock, for
// keys on the caller's slave, on other slaves or both, repeated keys,
// wide rows, one-shard calls and a table whose every shard is here; the
// key slice may be reused at once, and reads of two tables overlap.
func TestGetNextValues(t *testing.T) {
	for _, useNATS := range []bool{false, true} {
		for _, slaves := range []int{1, 3} {
			t.Run(fmt.Sprintf("nats=%v/slaves=%d", useNATS, slaves), func(t *testing.T) {
				wide := kvstore.TableSpec{Name: "w", Size: 300, Width: 3}.WithDefaults()
				narrow := kvstore.TableSpec{Name: "b", Size: 50, Width: 1, DType: kvstore.Float32}.WithDefaults()
				c := startCluster(t, slaves, useNATS, wide, narrow)
				ssp := kvstore.Consistency{Kind: kvstore.SSP, Staleness: 2}
				c.prepare(0, ssp, 1)
				cl := c.client(0, 0, 0, ssp)
				w, b := c.table(cl, wide), c.table(cl, narrow)
				rng := rand.New(rand.NewPCG(3, 4))
				for round := range 20 {
					var keys []uint64
					switch round % 4 {
					case 0: // anywhere, repeated
						for range 1 + rng.IntN(40) {
							keys = append(keys, rng.Uint64N(wide.Size))
						}
					case 1: // the first shard's only (on this slave)
						for range 1 + rng.IntN(20) {
							keys = append(keys, rng.Uint64N(wide.Size/uint64(slaves)))
						}
					case 2: // the last shard's only
						for range 1 + rng.IntN(20) {
							keys = append(keys, wide.Size-1-rng.Uint64N(wide.Size/uint64(slaves)))
						}
					case 3: // none
					}
					deltas := make([]float64, 3*len(keys))
					for i := range deltas {
						deltas[i] = float64(rng.IntN(100))
					}
					ok(t, w.Add(keys, deltas))
					ok(t, b.Add([]uint64{uint64(round)}, []float64{float64(round)}))
					ok(t, cl.Flush())
					out, bout := make([]float64, 3*len(keys)), make([]float64, 1)
					p, err := w.GetNext(keys, out)
					ok(t, err)
					pb, err := b.GetNext([]uint64{uint64(round)}, bout)
					ok(t, err)
					scratch := append([]uint64(nil), keys...)
					for i := range keys { // the caller's slice is free again
						keys[i] = wide.Size - 1
					}
					ok(t, cl.Clock())
					ok(t, pb.Wait())
					ok(t, p.Wait())
					want := make([]float64, 3*len(scratch))
					ok(t, w.Get(scratch, want))
					for i := range want {
						if out[i] != want[i] {
							t.Fatalf("round %d: GetNext %v, Get %v (keys %v)", round, out, want, scratch)
						}
					}
					if bout[0] != float64(round) {
						t.Fatalf("round %d: b[%d] = %v", round, round, bout[0])
					}
				}
				ok(t, cl.Finish())
			})
		}
	}
}

// TestGetNextRefusesBadKeys: a key out of range or a short buffer is
// refused when GetNext is called, on the static and the dynamic path.
func TestGetNextRefusesBadKeys(t *testing.T) {
	spec := kvstore.TableSpec{Name: "w", Size: 40, Width: 2}.WithDefaults()
	c := startCluster(t, 2, false, spec)
	cl := c.client(0, 0, 0, asp)
	w := c.table(cl, spec)
	for round := range 2 {
		if round == 1 {
			ok(t, w.Localize([]uint64{21, 23})) // the dynamic path from now on
		}
		if _, err := w.GetNext([]uint64{1, 40}, make([]float64, 4)); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Fatalf("round %d: key 40 of 40: %v", round, err)
		}
		if _, err := w.GetNext([]uint64{1, 2}, make([]float64, 3)); err == nil || !strings.Contains(err.Error(), "3 values for 2 keys") {
			t.Fatalf("round %d: short buffer: %v", round, err)
		}
	}
}

// TestGetAsyncAtTheBoundReadsLocalKeysAtWait: a worker at the staleness
// bound whose read the gate of its own slave holds gets GetAsync back at
// once (its keys in this slave's memory are read at Wait, gated then), so
// its next request, here another read of keys on the other slave, is not
// held up behind the wait; Wait returns once the slow worker clocks, with
// its iteration's Adds.
func TestGetAsyncAtTheBoundReadsLocalKeysAtWait(t *testing.T) {
	for _, cons := range []kvstore.Consistency{{Kind: kvstore.BSP}, {Kind: kvstore.SSP, Staleness: 1}} {
		t.Run(fmt.Sprintf("%s%d", cons.Kind, cons.Staleness), func(t *testing.T) {
			spec := kvstore.TableSpec{Name: "w", Size: 10, Width: 1}.WithDefaults()
			c := startCluster(t, 2, false, spec)
			c.prepare(0, cons, 2)
			fast, slow := c.client(0, 0, 0, cons), c.client(1, 0, 1, cons) // fast on s0, slow on s1
			ft, st := c.table(fast, spec), c.table(slow, spec)
			for range cons.Bound() + 1 {
				ok(t, fast.Clock()) // to the bound: the gates hold fast's reads
			}
			type started struct {
				p   kvstore.Pending
				err error
			}
			issue := func(keys []uint64, out []float64) chan started {
				ch := make(chan started, 1)
				go func() {
					p, err := ft.GetAsync(keys, out)
					ch <- started{p, err}
				}()
				return ch
			}
			var pending []kvstore.Pending
			outs := [][]float64{make([]float64, 1), make([]float64, 2), make([]float64, 1)}
			for i, keys := range [][]uint64{{0}, {0, 9}, {9}} { // here, both, the other slave
				select {
				case s := <-issue(keys, outs[i]):
					ok(t, s.err)
					pending = append(pending, s.p)
				case <-time.After(5 * time.Second):
					t.Fatalf("GetAsync(%v) at the bound did not return before the slow worker's Clock", keys)
				}
			}
			// One Wait at a time: a Client is not safe for concurrent use.
			done := waitDone(pending[1])
			blocked(t, done, "Wait of the read of both slaves' keys with the slow worker behind")
			ok(t, st.Add([]uint64{0, 9}, []float64{3, 4}))
			ok(t, slow.Clock())
			released(t, done, "Wait after the slow worker's Clock")
			ok(t, pending[0].Wait())
			ok(t, pending[2].Wait())
			for i, want := range [][]float64{{3}, {3, 4}, {4}} {
				for j := range want {
					if outs[i][j] != want[j] {
						t.Fatalf("read %d: %v, want the slow worker's iteration %v", i, outs[i], want)
					}
				}
			}
			ok(t, fast.Finish())
			ok(t, slow.Finish())
		})
	}
}
