package kvstore_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flexps/flexps/kvstore"
)

// TestGetFloat32MatchesGet: GetFloat32 reads exactly float32 of what Get
// reads (the bits of every value), on float32 and float64 tables, dense
// and sparse, width 1 and 3, with every shard here or spread over three
// slaves (read from this slave's memory, from others in order, or grouped
// by owner), repeated keys, after writes of the same iteration and after
// keys moved.
func TestGetFloat32MatchesGet(t *testing.T) {
	for _, slaves := range []int{1, 3} {
		for _, dt := range []kvstore.DType{kvstore.Float32, kvstore.Float64} {
			for _, storage := range []kvstore.Storage{kvstore.Dense, kvstore.Sparse} {
				for _, width := range []int{1, 3} {
					t.Run(fmt.Sprintf("slaves=%d/%s/%s/w%d", slaves, dt, storage, width), func(t *testing.T) {
						spec := kvstore.TableSpec{Name: "a", Size: 300, Width: width, DType: dt, Storage: storage}.WithDefaults()
						c := startCluster(t, slaves, false, spec)
						cl := c.client(0, 0, 0, asp)
						tb := c.table(cl, spec)
						rng := rand.New(rand.NewPCG(7, uint64(slaves*10+width)))
						for round := range 12 {
							if round == 8 && slaves > 1 {
								ok(t, tb.Localize([]uint64{299, 298, 150}))
							}
							n := 1 + rng.IntN(60)
							keys := make([]uint64, n)
							for i := range keys {
								switch round % 4 {
								case 1: // this slave's shard only
									keys[i] = rng.Uint64N(spec.Size / uint64(slaves))
								case 2: // the last shard's only, in order
									keys[i] = spec.Size - spec.Size/uint64(slaves) + uint64(i)%(spec.Size/uint64(slaves))
								default:
									keys[i] = rng.Uint64N(spec.Size)
								}
							}
							d := make([]float64, n*width)
							for i := range d {
								d[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-6))
							}
							ok(t, tb.Add(keys, d)) // unflushed: the reads must see it
							want := make([]float64, n*width)
							got := make([]float32, n*width)
							ok(t, tb.Get(keys, want))
							ok(t, tb.GetFloat32(keys, got))
							for i := range got {
								if math.Float32bits(got[i]) != math.Float32bits(float32(want[i])) {
									t.Fatalf("round %d key %d value %d: GetFloat32 %v, Get %v", round, keys[i/width], i%width, got[i], want[i])
								}
							}
							ok(t, cl.Clock())
						}
						if err := tb.GetFloat32([]uint64{1}, make([]float32, width+1)); err == nil || !strings.Contains(err.Error(), "values for 1 keys") {
							t.Fatalf("long out: %v", err)
						}
						if err := tb.GetFloat32([]uint64{spec.Size}, make([]float32, width)); err == nil || !strings.Contains(err.Error(), "out of range") {
							t.Fatalf("key out of range: %v", err)
						}
					})
				}
			}
		}
	}
}
