package kvstore_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

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

// TestLargeGetAnswersBuiltInSendBuffer: over the TCP data plane a shard
// encodes a large answer (>= 32 KiB of values) straight into the
// connection's send buffer (Server.answerRaw); the answers of large and
// small reads, of float32 and float64 tables, width 1 and 64, keys sorted,
// shuffled and repeated, parked by the SSP gate until the writer's clock
// (the test waits until the gates hold the read) and read again at once,
// hold exactly what was added.
func TestLargeGetAnswersBuiltInSendBuffer(t *testing.T) {
	for _, dt := range []kvstore.DType{kvstore.Float32, kvstore.Float64} {
		for _, width := range []int{1, 64} {
			t.Run(fmt.Sprintf("%s/w%d", dt, width), func(t *testing.T) {
				size := uint64(30000 / width * 3) // 3 shards of 10000 values (39-78 KiB answers)
				spec := kvstore.TableSpec{Name: "a", Size: size, Width: width, DType: dt, Storage: kvstore.Dense}.WithDefaults()
				c := newTCPCluster(t, 3, spec)
				ssp0 := kvstore.Consistency{Kind: kvstore.SSP, Staleness: 0}
				c.prepare(0, ssp0, 2)
				writer, reader := c.client(-1, 0, 0, ssp0), c.client(-1, 0, 1, ssp0)
				tw, tr := c.table(writer, spec), c.table(reader, spec)
				model := make([]float64, int(size)*width)
				rng := rand.New(rand.NewPCG(11, uint64(width)))
				for round := range 4 {
					var keys []uint64
					switch round {
					case 0: // every key, in order
						for k := range size {
							keys = append(keys, k)
						}
					case 1: // shuffled
						for _, k := range rng.Perm(int(size)) {
							keys = append(keys, uint64(k))
						}
					case 2: // repeats
						for range size {
							keys = append(keys, rng.Uint64N(size/4))
						}
					default: // small answers
						for range 5 {
							keys = append(keys, rng.Uint64N(size))
						}
					}
					d := make([]float64, len(keys)*width)
					for i := range d {
						d[i] = float64(float32(rng.NormFloat64()))
					}
					// The reader moves to the next clock first: its read
					// waits at the gate for the writer's clock.
					ok(t, reader.Clock())
					got := make([]float64, len(keys)*width)
					done := make(chan error, 1)
					before := parkedReads(c, 1)
					go func() { done <- tr.Get(keys, got) }()
					for deadline := time.Now().Add(10 * time.Second); parkedReads(c, 1) == before; time.Sleep(time.Millisecond) {
						if time.Now().After(deadline) {
							t.Fatal("the reader's read was never parked at a gate")
						}
					}
					ok(t, tw.Add(keys, d))
					for i, k := range keys {
						for j := range width {
							model[int(k)*width+j] += d[i*width+j]
							if dt == kvstore.Float32 {
								model[int(k)*width+j] = float64(float32(model[int(k)*width+j]))
							}
						}
					}
					ok(t, writer.Clock())
					ok(t, <-done)
					now := make([]float64, len(keys)*width) // and read again at once
					ok(t, tr.Get(keys, now))
					for i, k := range keys {
						for j := range width {
							w := model[int(k)*width+j]
							if got[i*width+j] != w || now[i*width+j] != w {
								t.Fatalf("round %d key %d value %d: parked read %v, read %v, want %v", round, k, j, got[i*width+j], now[i*width+j], w)
							}
						}
					}
				}
			})
		}
	}
}

// parkedReads is how many of worker's reads the gates of c's servers
// parked so far.
func parkedReads(c *cluster, worker int) int64 {
	var n int64
	for _, s := range c.servers {
		if g := s.Gate("task", 0); g != nil {
			_, waits, _ := g.Stats(worker)
			n += waits
		}
	}
	return n
}
