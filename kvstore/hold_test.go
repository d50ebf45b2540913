package kvstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/flexps/flexps/kvstore"
)

// TestHeldAddsMergeUntilClock: the second and later Adds of an iteration
// to a table are held and merged by key, sent as one message per owner
// when the iteration ends; reads, Flush, Set and other workers' gated
// reads see them; a worker with one Add per iteration sends at once.
func TestHeldAddsMergeUntilClock(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cons  kvstore.Consistency
		dtype kvstore.DType
		width int
		calls int // Add calls per iteration
	}{
		{"ssp one add per iteration", kvstore.Consistency{Kind: kvstore.SSP, Staleness: 1}, kvstore.Float64, 1, 1},
		{"ssp many adds", kvstore.Consistency{Kind: kvstore.SSP, Staleness: 1}, kvstore.Float64, 1, 40},
		{"bsp many adds, width 3, float32", kvstore.Consistency{Kind: kvstore.BSP}, kvstore.Float32, 3, 25},
		{"asp many adds", asp, kvstore.Float64, 2, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := kvstore.TableSpec{Name: "w", Size: 100, Width: tc.width, DType: tc.dtype}.WithDefaults()
			c := newCluster(t, 2, spec)
			c.prepare(0, tc.cons, 2)
			me := c.client(0, 0, 0, tc.cons) // on s0: keys 50..99 are remote
			other := c.client(1, 0, 1, tc.cons)
			mt, ot := c.table(me, spec), c.table(other, spec)
			keys := []uint64{3, 60, 61, 99, 60} // a repeated remote key too
			deltas := make([]float64, len(keys)*tc.width)
			for i := range deltas {
				deltas[i] = 0.5 * float64(i+1)
			}
			want := map[uint64][]float64{}
			for iter := 1; iter <= 2; iter++ {
				before := me.Stats().Requests
				for range tc.calls {
					holdNoErr(t, mt.Add(keys, deltas))
					for i, k := range keys {
						if want[k] == nil {
							want[k] = make([]float64, tc.width)
						}
						for j := range tc.width {
							want[k][j] += deltas[i*tc.width+j]
						}
					}
				}
				// One message for the first call (s1's keys); the others wait.
				holdEqual(t, int64(1), me.Stats().Requests-before, "messages during iteration", iter)
				if tc.calls > 1 {
					// A read sees the held Adds: they leave first.
					out := make([]float64, len(keys)*tc.width)
					holdNoErr(t, mt.Get(keys, out))
					holdEqual(t, int64(3), me.Stats().Requests-before, "messages after a read (1 held Add, 1 Get)")
					for i, k := range keys {
						for j := range tc.width {
							holdCheck(t, close32(out[i*tc.width+j], want[k][j]), "key", k, "read", out[i*tc.width+j], "want", want[k][j])
						}
					}
					holdNoErr(t, mt.Add(keys, deltas)) // held again
					for i, k := range keys {
						for j := range tc.width {
							want[k][j] += deltas[i*tc.width+j]
						}
					}
				}
				before = me.Stats().Requests
				holdNoErr(t, me.Clock())
				held := int64(0)
				if tc.calls > 1 {
					held = 1
				}
				clocks := int64(1) // to s1 (s0's gate is in memory)
				if tc.cons.Kind == kvstore.ASP {
					clocks = 0
				}
				holdEqual(t, held+clocks, me.Stats().Requests-before, "messages at Clock")
				// The other worker, at the same clock after its own Clock,
				// reads everything this worker added in the iteration
				// (BSP: the gate waits for this worker's Clock, which
				// left after the held Adds).
				holdNoErr(t, other.Clock())
				out := make([]float64, len(keys)*tc.width)
				done := make(chan error, 1)
				go func() { done <- ot.Get(keys, out) }()
				select {
				case err := <-done:
					holdNoErr(t, err)
				case <-time.After(5 * time.Second):
					t.Fatal("the other worker's read never returned")
				}
				if tc.cons.Kind == kvstore.BSP { // SSP and ASP may read older values
					for i, k := range keys {
						for j := range tc.width {
							holdCheck(t, close32(out[i*tc.width+j], want[k][j]), "iteration", iter, "other worker read key", k, out[i*tc.width+j], "want", want[k][j])
						}
					}
				}
			}
			holdNoErr(t, me.Finish())
			holdNoErr(t, other.Finish())
			out := make([]float64, len(keys)*tc.width)
			holdNoErr(t, ot.Get(keys, out))
			for i, k := range keys {
				for j := range tc.width {
					holdCheck(t, close32(out[i*tc.width+j], want[k][j]), "final key", k, out[i*tc.width+j], "want", want[k][j])
				}
			}
			if tc.calls > 1 {
				holdCheck(t, me.Stats().HeldKeys > 0, "no key was held")
			} else {
				holdEqual(t, int64(0), me.Stats().HeldKeys, "held keys with one Add per iteration")
			}
		})
	}
}

func close32(a, b float64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= 1e-6*max(1, b, -b)
}

// TestHeldAddsBeforeOverwriteAndFlush: a Set after held Adds overwrites
// them (they are sent first), and Flush sends and waits for them.
func TestHeldAddsBeforeOverwriteAndFlush(t *testing.T) {
	spec := kvstore.TableSpec{Name: "w", Size: 100, Width: 1}.WithDefaults()
	c := newCluster(t, 2, spec)
	c.prepare(0, asp, 1)
	me := c.client(0, 0, 0, asp)
	mt := c.table(me, spec)
	rd := c.table(c.client(-1, 0, -1, asp), spec) // a reader outside the stage
	k := []uint64{70}
	holdNoErr(t, mt.Add(k, []float64{1}))
	holdNoErr(t, mt.Add(k, []float64{2})) // held
	holdNoErr(t, mt.Set(k, []float64{100}))
	holdNoErr(t, mt.Add(k, []float64{5})) // held (third call)
	holdNoErr(t, me.Flush())
	out := []float64{0}
	holdNoErr(t, rd.Get(k, out))
	holdEqual(t, 105.0, out[0], "Set after held Adds, then a held Add flushed")
	holdNoErr(t, me.Finish())
}

// TestHeldAddsBoundedPerOwner: an owner's held buffer is sent when it
// reaches its bound, so memory stays bounded, and the sums stay exact.
func TestHeldAddsBoundedPerOwner(t *testing.T) {
	const n, width = 150_000, 16 // about 75k remote keys: 1.2M values, past the 1M bound
	spec := kvstore.TableSpec{Name: "w", Size: 2 * n, Width: width, Storage: kvstore.Sparse, Partition: kvstore.HashPartition}.WithDefaults()
	c := newCluster(t, 2, spec)
	c.prepare(0, asp, 1)
	me := c.client(0, 0, 0, asp)
	mt := c.table(me, spec)
	keys := make([]uint64, n)
	ones := make([]float64, n*width)
	for i := range keys {
		keys[i] = uint64(i)
	}
	for i := range ones {
		ones[i] = 1
	}
	holdNoErr(t, mt.Add(keys, ones))
	before := me.Stats().Requests
	holdNoErr(t, mt.Add(keys, ones)) // held, over the bound
	holdCheck(t, me.Stats().Requests > before, "a held buffer past its bound was not sent")
	holdNoErr(t, me.Flush())
	out := make([]float64, n*width)
	holdNoErr(t, mt.Get(keys, out))
	for i, v := range out {
		if v != 2 {
			t.Fatalf("value %d = %v, want 2", i, v)
		}
	}
	holdNoErr(t, me.Finish())
}

func BenchmarkAddsPerIteration(b *testing.B) {
	spec := kvstore.TableSpec{Name: "w", Size: 10000, Width: 1}.WithDefaults()
	for _, calls := range []int{1, 100} {
		b.Run(fmt.Sprintf("calls=%d", calls), func(b *testing.B) {
			c := newCluster(b, 2, spec)
			c.prepare(0, asp, 1)
			me := c.client(0, 0, 0, asp)
			mt := c.table(me, spec)
			keys := make([]uint64, 100)
			d := make([]float64, 100)
			for i := range keys {
				keys[i] = uint64(5000 + i*37)
				d[i] = 1
			}
			b.ResetTimer()
			for range b.N {
				for range calls {
					if err := mt.Add(keys, d); err != nil {
						b.Fatal(err)
					}
				}
				if err := me.Clock(); err != nil {
					b.Fatal(err)
				}
			}
			if err := me.Finish(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

func holdNoErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func holdEqual[T comparable](t testing.TB, want, got T, args ...any) {
	t.Helper()
	if want != got {
		t.Fatalf("%s: got %v, want %v", fmt.Sprint(args...), got, want)
	}
}

func holdCheck(t testing.TB, ok bool, args ...any) {
	t.Helper()
	if !ok {
		t.Error(fmt.Sprintln(args...))
	}
}
