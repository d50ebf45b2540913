package kvstore_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flexps/flexps/kvstore"
)

// TestAddFloat32MatchesAdd: AddFloat32 leaves a table exactly as Add of
// the same deltas widened to float64 does (the bits of every value), on
// float32 and float64 tables, dense and sparse, with every shard here or
// spread over three slaves, keys of one shard or several, repeated keys,
// a second Add in the iteration (held and merged) and after keys moved.
func TestAddFloat32MatchesAdd(t *testing.T) {
	for _, slaves := range []int{1, 3} {
		for _, dt := range []kvstore.DType{kvstore.Float32, kvstore.Float64} {
			for _, storage := range []kvstore.Storage{kvstore.Dense, kvstore.Sparse} {
				t.Run(fmt.Sprintf("slaves=%d/%s/%s", slaves, dt, storage), func(t *testing.T) {
					a := kvstore.TableSpec{Name: "a", Size: 300, Width: 3, DType: dt, Storage: storage}.WithDefaults()
					b := a
					b.Name = "b"
					c := startCluster(t, slaves, false, a, b)
					cl := c.client(0, 0, 0, asp)
					ta, tb := c.table(cl, a), c.table(cl, b)
					rng := rand.New(rand.NewPCG(5, uint64(slaves)))
					for round := range 12 {
						if round == 8 && slaves > 1 {
							ok(t, ta.Localize([]uint64{299, 298, 150}))
							ok(t, tb.Localize([]uint64{299, 298, 150}))
						}
						for call := range 1 + round%3 { // later calls are held
							n := 1 + rng.IntN(50)
							keys := make([]uint64, n)
							for i := range keys {
								switch round % 4 {
								case 1: // the first shard's only
									keys[i] = rng.Uint64N(a.Size / uint64(slaves))
								default:
									keys[i] = rng.Uint64N(a.Size)
								}
							}
							d32 := make([]float32, n*3)
							d64 := make([]float64, n*3)
							for i := range d32 {
								d32[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-6)))
								d64[i] = float64(d32[i])
							}
							ok(t, ta.AddFloat32(keys, d32))
							ok(t, tb.Add(keys, d64))
							_ = call
						}
						ok(t, cl.Clock())
					}
					ok(t, cl.Flush())
					all := make([]uint64, a.Size)
					for i := range all {
						all[i] = uint64(i)
					}
					ga, gb := make([]float64, 3*a.Size), make([]float64, 3*a.Size)
					ok(t, ta.Get(all, ga))
					ok(t, tb.Get(all, gb))
					for i := range ga {
						if math.Float64bits(ga[i]) != math.Float64bits(gb[i]) {
							t.Fatalf("key %d value %d: AddFloat32 %v, Add %v", i/3, i%3, ga[i], gb[i])
						}
					}
					if err := ta.AddFloat32([]uint64{1}, []float32{1}); err == nil || !strings.Contains(err.Error(), "1 values for 1 keys of width 3") {
						t.Fatalf("short deltas: %v", err)
					}
					if err := ta.AddFloat32([]uint64{a.Size}, []float32{1, 2, 3}); err == nil || !strings.Contains(err.Error(), "out of range") {
						t.Fatalf("key out of range: %v", err)
					}
				})
			}
		}
	}
}

// TestAddFloat32LendsLargeDeltas: over the TCP data plane, large float32
// deltas are written to the connection from the caller's slice (not
// copied), and AddFloat32 returns only once they were: deltas the caller
// overwrites right after the call still land as they were. Keys of one
// shard (the caller's slice itself) and of several (a scratch buffer,
// refilled per shard), from a client on no slave and from one beside a
// shard, leave the table as Add of the same deltas does.
func TestAddFloat32LendsLargeDeltas(t *testing.T) {
	const width, size = 64, 6000
	for _, self := range []int{-1, 0} {
		t.Run(fmt.Sprintf("self=%d", self), func(t *testing.T) {
			a := kvstore.TableSpec{Name: "a", Size: size, Width: width, DType: kvstore.Float32, Storage: kvstore.Dense}.WithDefaults()
			b := a
			b.Name = "b"
			c := newTCPCluster(t, 3, a, b)
			cl := c.client(self, 0, 0, asp)
			ta, tb := c.table(cl, a), c.table(cl, b)
			rng := rand.New(rand.NewPCG(7, uint64(self+1)))
			for round := range 6 {
				n := 1500 + rng.IntN(2000)
				keys := make([]uint64, n)
				for i := range keys {
					if round%2 == 0 { // the second shard's only
						keys[i] = size/3 + rng.Uint64N(size/3)
					} else {
						keys[i] = rng.Uint64N(size)
					}
				}
				d32 := make([]float32, n*width)
				d64 := make([]float64, n*width)
				for i := range d32 {
					d32[i] = float32(rng.NormFloat64())
					d64[i] = float64(d32[i])
				}
				ok(t, ta.AddFloat32(keys, d32))
				for i := range d32 {
					d32[i] = float32(math.NaN()) // the caller's buffer, reused at once
				}
				ok(t, tb.Add(keys, d64))
				ok(t, cl.Clock())
			}
			ok(t, cl.Flush())
			if st := cl.Stats(); st.BytesLent < 64<<10 {
				t.Fatalf("stats %+v: no deltas were lent to the connection", st)
			}
			all := make([]uint64, size)
			for i := range all {
				all[i] = uint64(i)
			}
			ga, gb := make([]float64, width*size), make([]float64, width*size)
			ok(t, ta.Get(all, ga))
			ok(t, tb.Get(all, gb))
			for i := range ga {
				if math.Float64bits(ga[i]) != math.Float64bits(gb[i]) {
					t.Fatalf("key %d value %d: AddFloat32 %v, Add %v", i/width, i%width, ga[i], gb[i])
				}
			}
		})
	}
}
